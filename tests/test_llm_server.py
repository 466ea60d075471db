"""Integration test: llama.cpp's OpenAI-compatible server with SmolLM2-135M on 127.0.0.1, reached through
`kgqa_nb.llm.openai.OpenAIBackend` (completions endpoint). Needs the LLM packages (scripts/install_llm.sh)."""
import os, socket, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest

# before llama.cpp is loaded (importorskip below loads it): OpenMP reads this once, and its spinning threads
# starve each other on a shared 2-core machine (the in-process tests ran 10-20 times slower without it)
os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
from kgqa_nb.llm.base import ConstraintUnsupportedError, Decoding, LLMUnavailableError, usage_summary
from kgqa_nb.llm.cache import CachedBackend
from kgqa_nb.llm.openai import OpenAIBackend
from kgqa_nb.llm.llamacpp import local_model_path

pytest.importorskip('llama_cpp.server', reason='needs llama-cpp-python[server] (scripts/install_llm.sh)')

STARTUP_SECONDS = 60
PROMPTS = ['def add(a, b):\n    """Return the sum of a and b."""\n',
           'Question: What is the capital of France?\nAnswer:',
           '# a Python function that reverses a string\ndef',
           'The three primary colours are',
           'Question: Who wrote Hamlet?\nAnswer:',
           'for i in range(10):\n']
GREEDY = Decoding(max_tokens=12)
YES_NO = Decoding(max_tokens=4, grammar='root ::= "yes" | "no"')
QUESTION = 'Question: Is Paris a city in France? Answer yes or no.\nAnswer: '


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
        env = {k: v for k, v in os.environ.items() if not k.endswith(('_BASE_URL', '_GRAMMAR_API'))}
        env.update(OPENAI_BASE_URL=url, KGQA_CACHE=str(tmp_path/'cache'))  # a fresh response cache: real requests
        env.update(KGQA_LLM_GRAMMAR_API='llama.cpp')  # codellama's preset expects vLLM; here a llama.cpp server answers
        out = tmp_path/'run'
        subprocess.run([sys.executable, '-m', 'papermill', '--cwd', 'nbs/experiments', 'nbs/experiments/run_kqapro.ipynb', str(tmp_path/'out.ipynb'),
                        '-p', 'model', 'codellama', '-p', 'n_questions', '2', '-p', 'out_dir', str(out)],
                       cwd=Path(__file__).parents[1], env=env, check=True, capture_output=True, timeout=600)
    finally: stop(proc)
    import json
    metrics = json.loads((out/'metrics.json').read_text())
    assert metrics['model'] == 'codellama' and metrics['questions_done'] == 2
    records = [json.loads(l) for l in (out/'records.jsonl').read_text().splitlines()]
    assert len(records) == 2 and all(r['llm']['calls'] >= 1 and r['llm']['cached'] == 0 for r in records)


def test_grammar_through_llama_cpp_server(server_url):
    "The server reads the GBNF text from the request body's `grammar` field: the answer obeys it."
    b = OpenAIBackend('smollm2', base_url=server_url, timeout=60, retries=1, grammar_api='llama.cpp')
    for c in [b.complete(QUESTION, YES_NO), b.complete(PROMPTS[1], YES_NO)]:
        assert c.text in ('yes', 'no') and c.constrained
    digits = b.complete('Count to five in digits:', Decoding(max_tokens=12, grammar='root ::= [0-9] ([ ,] [0-9])*'))
    assert digits.text and set(digits.text) <= set('0123456789 ,') and digits.constrained
    chat = OpenAIBackend('smollm2', base_url=server_url, mode='chat', retries=0, grammar_api='llama.cpp')
    c = chat.complete('Is Paris in France?', YES_NO)
    assert c.text in ('yes', 'no') and c.constrained


def test_vllm_fields_are_ignored_not_refused_by_llama_cpp_server(server_url):
    "A server ignores the grammar fields of another server's API (HTTP 200): `grammar_api` must name the real server."
    b = OpenAIBackend('smollm2', base_url=server_url, timeout=60, retries=0, grammar_api='vllm')
    assert b._request_args(YES_NO)['extra_body']['structured_outputs'] == {'grammar': YES_NO.grammar}
    assert b.complete(QUESTION, YES_NO).completion_tokens > 0


def test_grammar_fallback_sends_the_request_without_it(server_url):
    b = OpenAIBackend('smollm2', base_url=server_url, timeout=60, retries=0, grammar_api='none',
                      grammar_fallback='unconstrained')
    assert 'extra_body' not in b._request_args(YES_NO)
    c = b.complete(QUESTION, YES_NO)
    assert not c.constrained and c.completion_tokens > 0


def test_grammar_refused_before_any_request():
    "No server needed: with grammar_api='none' the error comes before the request (the URL is never contacted)."
    b = OpenAIBackend('gpt-4', base_url=f'http://127.0.0.1:{free_port()}/v1', check=False, retries=0,
                      grammar_api='none')
    with pytest.raises(ConstraintUnsupportedError) as e:
        b.complete(QUESTION, YES_NO)
    msg = str(e.value)
    assert 'cannot decode under a grammar' in msg and 'gpt-4' in msg and '127.0.0.1' in msg
    for way_out in ["grammar_api='llama.cpp'", "grammar_api='vllm'", "grammar_fallback='unconstrained'"]:
        assert way_out in msg
    assert not b.records


def test_constrained_round_trips_through_the_cache(server_url, tmp_path):
    b = OpenAIBackend('smollm2', base_url=server_url, timeout=60, retries=1, grammar_api='llama.cpp')
    cached = CachedBackend(b, tmp_path/'responses.sqlite')
    first, again = cached.complete(QUESTION, YES_NO), cached.complete(QUESTION, YES_NO)
    assert first.constrained and again.cached and again.constrained and again.text == first.text
    assert not cached.complete(QUESTION, Decoding(max_tokens=4)).cached  # no grammar: another key


# ---------------------------------------------------------------- grammar engines of the in-process llama.cpp backend
# No server here: `LlamaCppBackend` with SmolLM2 under llama.cpp's GBNF sampler and under llguidance's token mask.
CITIES = [('Paris', 'yes'), ('Tokyo', 'no'), ('Rome', 'yes'), ('Lima', 'no'), ('Oslo', 'yes'), ('Cairo', 'no')] * 2
ASK = ''.join(f'Question: Is {c} a city in Europe?\nAnswer: {a}\n\n' for c, a in CITIES) + \
      'Question: Is Madrid a city in Europe?\nAnswer: '
DIGITS = Decoding(max_tokens=12, grammar='root ::= [0-9] ([ ,] [0-9])*')


@pytest.fixture(scope='module')
def engines():
    "One SmolLM2 backend per grammar engine."
    pytest.importorskip('llguidance', reason='needs llguidance (scripts/install_llm.sh)')
    from kgqa_nb.llm.presets import get_backend
    return {e: get_backend('smollm2-135m', cache=False, engine=e) for e in ('gbnf', 'llguidance')}


def test_engines_give_the_same_greedy_text(engines):
    assert {e: b.engine for e, b in engines.items()} == {'gbnf': 'gbnf', 'llguidance': 'llguidance'}
    stopped = Decoding(max_tokens=8, grammar='root ::= "yes" | "no"', stop=('o',))
    runs = [(ASK, YES_NO), (QUESTION, YES_NO), ('Count: one two three, in digits:', DIGITS),
            ('Count to five in digits:', DIGITS), (ASK, stopped)]
    got = {e: [b.complete(p, d) for p, d in runs] for e, b in engines.items()}
    assert [c.text for c in got['gbnf']] == [c.text for c in got['llguidance']]
    assert [c.finish_reason for c in got['gbnf']] == [c.finish_reason for c in got['llguidance']]
    for c in got['llguidance'][:2]:  # the grammar is complete after yes or no: generation stops there
        assert c.text in ('yes', 'no') and c.constrained and c.finish_reason == 'stop' and c.completion_tokens <= 2
    for c in got['llguidance'][2:4]:
        assert c.text and set(c.text) <= set('0123456789 ,') and c.constrained
    assert got['llguidance'][4].text in ('n', 'yes') and got['llguidance'][4].finish_reason == 'stop'  # a stop string
    assert engines['llguidance'].complete(ASK, YES_NO).text == got['llguidance'][0].text  # warm prefix, same answer
    assert engines['llguidance'].last_reused_tokens >= 64


def test_kopl_grammar_under_both_engines(engines):
    "A generated KoPL grammar (CodeAlignKGQA syntax) gives a parseable program, the same under both engines."
    import kgqa_nb.programs.prompts
    from kgqa_nb.programs.grammar import program_grammar
    from kgqa_nb.programs.parse import parse_generation
    parts = kgqa_nb.programs.prompts.codealign_prompt('How many countries have more than 50 million people?', [], ['country'],
                                             demos=list(kgqa_nb.programs.prompts.DemoPool.manual_kqapro())[:3],
                                             include_facts=False)
    d = Decoding(max_tokens=128, stop=parts.stop, grammar=program_grammar('codealign', 'syntax').gbnf())
    b = engines['llguidance']  # one backend, the engine switched between calls: the long prompt is read once
    texts = {}
    try:
        for e in ('llguidance', 'gbnf'):
            b.engine = e
            c = b.complete(parts.text, d)
            assert c.constrained and c.completion_tokens > 0, e
            parsed = parse_generation(c.text, 'codealign', parts.answer_start)
            assert parsed.ok, (e, c.text, parsed.issue)
            texts[e] = c.text
        assert b.last_reused_tokens >= 64  # the second call reused the prompt's prefix
    finally: b.engine = 'llguidance'
    assert texts['gbnf'] == texts['llguidance']


def test_llguidance_problems_are_call_errors(engines):
    from kgqa_nb.llm.base import LLMCallError
    b = engines['llguidance']
    for bad, says in [('root ::= [a-', 'Unexpected end of input'), ('root ::= missing', "Rule 'missing' not found"),
                      ('start ::= "a"', "No 'root' rule"), ('root ::= x\nx ::= x "b"', 'NoExtension'),
                      ('root ::= "a" [b-a]', 'invalid character class range')]:  # llama.cpp's parser aborts on [b-a]
        with pytest.raises(LLMCallError) as e:
            b.complete(ASK, Decoding(grammar=bad))
        assert says in str(e.value) and 'llguidance rejects the grammar gbnf:' in str(e.value), (bad, str(e.value))
        assert Decoding(grammar=bad).grammar_sha256 not in b._matchers
    # a grammar whose trouble shows only after the first token: the matcher's error state ends the call
    with pytest.raises(LLMCallError) as e:
        b.complete('Say a:', Decoding(max_tokens=5, grammar='root ::= "a" x\nx ::= x "b"'))
    assert 'failed in llguidance after 1 generated token' in str(e.value)
    assert b.complete(ASK, YES_NO).text in ('yes', 'no')  # the model and the backend still work
