"""Speed of llama.cpp builds side by side: the installed runtime against others, same model, prompt and machine.

    python scripts/bench_llm_build.py --build installed= --build native=/tmp/native_site [--out outputs/llm_build.json]

Each `--build NAME=SITE` is a llama-cpp-python installed in SITE (`pip install --no-deps --target SITE WHEEL`; an empty
SITE is the one this Python imports). Each build runs in its own child process (a build with instructions this CPU does
not allow dies there with SIGILL, which is reported, not fatal): it loads Qwen2.5-Coder-1.5B, reads a fixed prompt of
about 400 tokens (no prefix reuse: the cache is reset) and generates 64 tokens greedily, `--repeats` times, and
reports prompt and generation tokens per second (the median over repeats) and how many AMX `tilezero` instructions
its libggml-cpu.so holds. The builds take turns, repeat by repeat, so that a change of machine load hits both alike.
"""
import argparse, json, os, platform, shutil, statistics, subprocess, sys, time
from pathlib import Path

CHILD = r'''
import json, sys, time
from llama_cpp import Llama
from kgqa_nb.llm.llamacpp import local_model_path
m = Llama(model_path=str(local_model_path('qwen2.5-coder-1.5b')), n_ctx=1024, n_threads=int(sys.argv[1]),
          verbose=False)
prompt = ' '.join(f'def f{i}(x): return x + {i}' for i in range(40))
m.reset()
t = time.perf_counter(); m.eval(m.tokenize(prompt.encode())); read = time.perf_counter() - t
n_prompt = m.n_tokens
m.reset()
t = time.perf_counter()
out = m.create_completion(prompt, max_tokens=64, temperature=0, stop=[])
total = time.perf_counter() - t
gen = out['usage']['completion_tokens']
print(json.dumps(dict(prompt_tokens=n_prompt, prompt_tok_s=n_prompt / read, completion_tokens=gen,
                      gen_tok_s=gen / max(total - read, 1e-9), text=out['choices'][0]['text'][:40])))
'''


def tilezero_count(site: str) -> int | None:
    "AMX `tilezero` instructions in the build's libggml-cpu.so (None: objdump or the library missing)."
    env = {**os.environ, 'PYTHONPATH': site} if site else None
    where = subprocess.run([sys.executable, '-c', 'import importlib.util as u; print(u.find_spec("llama_cpp").origin)'],
                           capture_output=True, text=True, env=env).stdout.strip()
    libs = list(Path(where).parent.rglob('libggml-cpu*.so')) if where else []
    if not libs or not shutil.which('objdump'): return None
    dis = subprocess.run(['objdump', '-d', str(libs[0])], capture_output=True, text=True).stdout
    return sum('tilezero' in line for line in dis.splitlines())


def run_once(site: str, threads: int) -> dict:
    env = {**os.environ, 'PYTHONPATH': site + (os.pathsep + os.environ['PYTHONPATH'] if 'PYTHONPATH' in os.environ
                                               else '')} if site else None
    p = subprocess.run([sys.executable, '-c', CHILD, str(threads)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return dict(error=f'exit {p.returncode}' + (' (SIGILL)' if p.returncode == -4 else ''),
                    stderr=p.stderr.strip().splitlines()[-1:] or [''])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--build', action='append', required=True, help='NAME=SITE (empty SITE: this Python\'s own)')
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--threads', type=int, default=os.cpu_count())
    ap.add_argument('--out', default=None, help='write the figures to this JSON file')
    a = ap.parse_args()
    builds = dict(b.split('=', 1) for b in a.build)
    runs = {name: [] for name in builds}
    for _ in range(a.repeats):
        for name, site in builds.items(): runs[name].append(run_once(site, a.threads))
    result = dict(machine=dict(cpu=platform.processor() or platform.machine(), cores=os.cpu_count(),
                               threads=a.threads), repeats=a.repeats, builds={})
    for name, rs in runs.items():
        ok = [r for r in rs if 'error' not in r]
        figs = dict(tilezero=tilezero_count(builds[name]), errors=[r for r in rs if 'error' in r])
        if ok:
            figs.update(prompt_tokens=ok[0]['prompt_tokens'], completion_tokens=ok[0]['completion_tokens'],
                        prompt_tok_s=round(statistics.median(r['prompt_tok_s'] for r in ok), 2),
                        gen_tok_s=round(statistics.median(r['gen_tok_s'] for r in ok), 2),
                        same_text=len({r['text'] for r in ok}) == 1)
        result['builds'][name] = figs
        print(f"{name:>10}: prompt {figs.get('prompt_tok_s', '-')} tok/s, generation {figs.get('gen_tok_s', '-')} tok/s"
              f", tilezero {figs['tilezero']}, errors {len(figs['errors'])}")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
