"""Integration test: llama.cpp's OpenAI-compatible server with SmolLM2-135M on 127.0.0.1, reached through
`kgqa_nb.llm.OpenAIBackend` (completions endpoint). Needs the LLM packages (scripts/install_llm.sh)."""
import os, socket, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest
from kgqa_nb.llm import (CachedBackend, Decoding, LLMUnavailableError, OpenAIBackend, local_model_path,
                         usage_summary)

pytest.importorskip('llama_cpp.server', reason='needs llama-cpp-python[server] (scripts/install_llm.sh)')

STARTUP_SECONDS = 60
PROMPTS = ['def add(a, b):\n    """Return the sum of a and b."""\n',
           'Question: What is the capital of France?\nAnswer:',
           '# a Python function that reverses a string\ndef',
           'The three primary colours are',
           'Question: Who wrote Hamlet?\nAnswer:',
           'for i in range(10):\n']
GREEDY = Decoding(max_tokens=12)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen, log: Path, seconds: float):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f'llama_cpp.server exited with {proc.returncode}:\n{log.read_text()[-3000:]}')
        try:
            with urllib.request.urlopen(url + '/models', timeout=1): return
        except OSError: time.sleep(0.25)
    raise TimeoutError(f'llama_cpp.server did not answer at {url} within {seconds} s:\n{log.read_text()[-3000:]}')


def start_server(log: Path, n_ctx: int, n_batch: int) -> tuple:
    "A llama_cpp.server with SmolLM2 on a free local port: (process, base URL), once it answers."
    port = free_port()
    with open(log, 'w') as out:
        proc = subprocess.Popen([sys.executable, '-m', 'llama_cpp.server', '--model', str(local_model_path('smollm2-135m')),
                                 '--host', '127.0.0.1', '--port', str(port), '--n_ctx', str(n_ctx), '--n_threads', '2',
                                 '--n_batch', str(n_batch)],
                                stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, 'OMP_WAIT_POLICY': os.environ.get('OMP_WAIT_POLICY', 'PASSIVE')})
    url = f'http://127.0.0.1:{port}/v1'
    try: wait_until_up(url, proc, log, STARTUP_SECONDS)
    except Exception:
        stop(proc); raise
    return proc, url


def stop(proc: subprocess.Popen):
    proc.terminate()
    try: proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill(); proc.wait()


@pytest.fixture(scope='module')
def server_url(tmp_path_factory):
    # --n_batch 1: the server reuses the previous prompt's KV cache, and llama.cpp rounds a token's state
    # differently alone than inside a batch, so with larger batches a repeated greedy prompt can change
    # its answer. Evaluating every prompt token alone makes the answers independent of call history.
    proc, url = start_server(tmp_path_factory.mktemp('llama_server')/'server.log', n_ctx=2048, n_batch=1)
    try: yield url
    finally: stop(proc)


@pytest.fixture(scope='module')
def backend(server_url):
    return OpenAIBackend('smollm2', base_url=server_url, timeout=60, retries=1)


def test_greedy_answer_is_repeatable(backend):
    a, b = backend.complete(PROMPTS[0], GREEDY), backend.complete(PROMPTS[0], GREEDY)
    assert a.text.strip() and a.text == b.text
    assert a.prompt_tokens > 0 and 0 < a.completion_tokens <= GREEDY.max_tokens
    assert a.finish_reason in ('stop', 'length') and a.seconds > 0 and not a.cached


def test_chat_mode(server_url):
    chat = OpenAIBackend('smollm2', base_url=server_url, mode='chat', retries=0)
    assert chat.complete('Say hello.', Decoding(max_tokens=4)).text.strip()


def test_model_id_from_server(server_url):
    assert OpenAIBackend(base_url=server_url).model  # no model given: the server's first model


def test_complete_many_matches_sequential(backend):
    sequential = [backend.complete(p, GREEDY).text for p in PROMPTS]
    concurrent = [c.text for c in backend.complete_many(PROMPTS, GREEDY, max_workers=4)]
    assert concurrent == sequential


def test_cache_makes_no_second_call(backend, tmp_path):
    cached = CachedBackend(backend, tmp_path/'responses.sqlite')
    n = len(backend.records)
    first = cached.complete_many(PROMPTS[:3], GREEDY, max_workers=4)
    assert len(backend.records) == n + 3
    again = cached.complete_many(PROMPTS[:3], GREEDY, max_workers=4)
    assert len(backend.records) == n + 3  # no new request reached the server
    assert [c.text for c in again] == [c.text for c in first] and all(c.cached for c in again)
    assert usage_summary(cached.records)['cached_calls'] == 3


def test_unreachable_port_names_the_variable():
    t = time.monotonic()
    with pytest.raises(LLMUnavailableError) as e:
        OpenAIBackend('smollm2', base_url=f'http://127.0.0.1:{free_port()}/v1')
    assert 'KGQA_LLM_BASE_URL' in str(e.value) and 'OPENAI_BASE_URL' in str(e.value) and '127.0.0.1' in str(e.value)
    assert time.monotonic() - t < 10  # fails fast, not after minutes of retries


def test_wrong_path_is_reported(server_url):
    with pytest.raises(LLMUnavailableError) as e:
        OpenAIBackend('smollm2', base_url=server_url.removesuffix('/v1') + '/api')
    assert '404' in str(e.value) and '/v1' in str(e.value)


def test_run_kqapro_notebook_on_a_served_model(tmp_path):
    "The README's served-model path: `run_kqapro -p model codellama` with OPENAI_BASE_URL at a llama.cpp server runs."
    papermill = pytest.importorskip('papermill')
    proc, url = start_server(tmp_path/'server.log', n_ctx=8192, n_batch=512)  # the KQA Pro prompt is ~3,600 tokens
    try:
        env = {k: v for k, v in os.environ.items() if not k.endswith('_BASE_URL')}
        env.update(OPENAI_BASE_URL=url, KGQA_CACHE=str(tmp_path/'cache'))  # a fresh response cache: real requests
        out = tmp_path/'run'
        subprocess.run([sys.executable, '-m', 'papermill', '--cwd', 'nbs', 'nbs/run_kqapro.ipynb', str(tmp_path/'out.ipynb'),
                        '-p', 'model', 'codellama', '-p', 'n_questions', '2', '-p', 'out_dir', str(out)],
                       cwd=Path(__file__).parents[1], env=env, check=True, capture_output=True, timeout=600)
    finally: stop(proc)
    import json
    metrics = json.loads((out/'metrics.json').read_text())
    assert metrics['model'] == 'codellama' and metrics['questions_done'] == 2
    records = [json.loads(l) for l in (out/'records.jsonl').read_text().splitlines()]
    assert len(records) == 2 and all(r['llm']['calls'] >= 1 and r['llm']['cached'] == 0 for r in records)
