"""A Python snippet run in a fresh interpreter with its own KGQA_CACHE: for tests of on-disk indexes that several
processes open or build at once."""
import json, os, subprocess, sys


def start_child(code: str, arg, cache) -> subprocess.Popen:
    "Start `python -c code arg` with KGQA_CACHE=cache (offline Hugging Face); returns at once."
    env = {**os.environ, 'KGQA_CACHE': str(cache), 'HF_HUB_OFFLINE': '1'}
    return subprocess.Popen([sys.executable, '-c', code, str(arg)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def child_result(p: subprocess.Popen, timeout: int = 600):
    "The JSON the child printed last; fails the test with the child's stderr when it failed."
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])
