"""One-token smoke run of the local LLM runtime, in a child process, with one line of verdict.

    python scripts/smoke_llm.py [--model smollm2-135m] [--cmake-args "..."]

Run by scripts/install_llm.sh after every install. The child loads the model and decodes one token; a runtime built
for instructions this CPU does not allow dies there with SIGILL (which would otherwise kill the first notebook's
kernel much later). The parent prints `LLM smoke run: ok (...)` or one line naming what failed and how to rebuild,
and exits non-zero on failure, so `make install` stops before anything else runs.
"""
import argparse, signal, subprocess, sys, time

CHILD = '''
import sys
from llama_cpp import Llama
from kgqa_nb.llm.llamacpp import local_model_path
m = Llama(model_path=str(local_model_path(sys.argv[1])), n_ctx=64, n_threads=1, verbose=False)
out = m.create_completion('Hello', max_tokens=1, temperature=0)
print(repr(out['choices'][0]['text']))
'''

REBUILD = ('rebuild the runtime for this CPU with `rm -f .venv/.kgqa_installed .venv/.llama_cmake_args && make install`'
           ' (flags are read from /proc/cpuinfo), or choose them yourself, e.g. '
           '`CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF" make install`')


def verdict(rc: int,  # the child's return code (negative: killed by that signal)
            stderr: str,  # what it printed on stderr
            cmake_args: str,  # the flags the runtime was built with ('' if not known)
           ) -> str:
    "One line that says what failed, its likely cause and how to rebuild."
    built = f' (built with CMAKE_ARGS="{cmake_args}")' if cmake_args else ''
    if rc < 0 and -rc == signal.SIGILL:
        return (f'LLM smoke run FAILED: llama.cpp died with SIGILL (illegal instruction): the runtime{built} uses an '
                f'instruction this CPU does not allow (AMX or AVX-512 on a VM that hides it); {REBUILD}')
    if rc < 0:
        return f'LLM smoke run FAILED: llama.cpp was killed by {signal.Signals(-rc).name}{built}; {REBUILD}'
    last = next((l.strip() for l in reversed(stderr.strip().splitlines()) if l.strip()), 'no message')
    return f'LLM smoke run FAILED (exit {rc}): {last[:300]}'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--model', default='smollm2-135m', help='a key of kgqa_nb.llm.llamacpp.LOCAL_MODELS')
    ap.add_argument('--cmake-args', default='', help='the build flags, to name them in a failure line')
    a = ap.parse_args()
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, '-c', CHILD, a.model], capture_output=True, text=True)
    if p.returncode != 0:
        print(verdict(p.returncode, p.stderr, a.cmake_args), file=sys.stderr)
        return 1
    print(f'LLM smoke run: ok ({a.model}, one token {p.stdout.strip()} in {time.perf_counter() - t0:.1f} s)',
          file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
