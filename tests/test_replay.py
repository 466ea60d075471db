"""The replay server (`kgqa_nb.llm.replay`) against `OpenAIBackend`'s retries, backoff, Retry-After and rate limits: 429
storms, 5xx, dropped connections, timeouts, a server killed in the middle of a batch and restarted, one that stays
down, and the command line. No model: the server answers from a script."""
import os, socket, subprocess, sys, threading, time, urllib.request
from pathlib import Path
import pytest

from kgqa_nb.llm.base import LLMCallError, LLMUnavailableError
from kgqa_nb.llm.openai import OpenAIBackend, RateLimiter
from kgqa_nb.llm.replay import Faults, ReplayServer

PROMPTS = [f'question {i}' for i in range(40)]


def echo(prompt: str) -> str: return f'answer to {prompt}'


def client(srv: ReplayServer, **kw) -> OpenAIBackend:
    kw = {'retries': 10, 'backoff': 0.02, 'max_backoff': 0.5, 'timeout': 5.0, **kw}
    return OpenAIBackend('replay', base_url=srv.url, **kw)


def test_429_storm_with_retry_after():
    with ReplayServer(echo, faults=Faults(rate_429=0.3, retry_after=0.05, seed=0), slots=8) as srv:
        b = client(srv)
        waits = []
        real_sleep = b._sleep
        b._sleep = lambda s: (waits.append(s), real_sleep(s))
        got = b.complete_many(PROMPTS, max_workers=8)
    assert [c.text for c in got] == [echo(p) for p in PROMPTS]
    assert srv.stats['429'] >= 5 and b.retried == {'429': srv.stats['429']}
    assert all(w >= 0.05 for w in waits)  # never sooner than the server asked
    assert all(srv.answered[p] == 1 for p in PROMPTS) and srv.stats['answered'] == len(PROMPTS)


def test_500s_drops_and_timeouts_are_retried():
    faults = Faults(rate_500=0.1, rate_drop=0.1, rate_timeout=0.05, hang=3.0, seed=1)
    with ReplayServer(echo, faults=faults, slots=8) as srv:
        b = client(srv, timeout=0.5)
        got = b.complete_many(PROMPTS, max_workers=8)
    assert [c.text for c in got] == [echo(p) for p in PROMPTS]
    assert set(b.retried) <= {'500', 'connection', 'timeout'} and sum(b.retried.values()) == \
        srv.stats['500'] + srv.stats['drop'] + srv.stats['timeout'] > 0
    assert all(srv.answered[p] == 1 for p in PROMPTS)


def test_slots_bound_the_server_and_concurrency_scales():
    with ReplayServer(echo, latency=0.2, slots=8) as srv:
        b = client(srv)
        t = time.perf_counter()
        got = b.complete_many(PROMPTS[:32], max_workers=16)
        took = time.perf_counter() - t
    assert [c.text for c in got] == [echo(p) for p in PROMPTS[:32]]
    assert srv.max_in_flight == 8 and 0.8 <= took < 3.0, took  # four rounds of 0.2 s; one at a time: 6.4 s


def test_server_killed_mid_batch_and_restarted():
    with ReplayServer(echo, latency=0.3, slots=4) as srv:
        b = client(srv, backoff=0.3, max_backoff=2.0)
        out = {}
        worker = threading.Thread(target=lambda: out.update(got=b.complete_many(PROMPTS[:16], max_workers=8)))
        worker.start()
        time.sleep(0.45)  # the first four are answered, the next four are waiting for their answer
        srv.down_for(1.0)
        worker.join(60)
        assert not worker.is_alive()
    assert [c.text for c in out['got']] == [echo(p) for p in PROMPTS[:16]]
    assert b.retried['connection'] >= 4  # the requests the kill dropped, and those refused while it was down


def test_server_that_stays_down_ends_in_one_clear_error():
    srv = ReplayServer(echo).start()
    b = client(srv, retries=3, backoff=0.05)
    srv.stop()
    t = time.perf_counter()
    with pytest.raises(LLMUnavailableError) as e:
        b.complete('q')
    assert time.perf_counter() - t < 5
    msg = str(e.value)
    assert msg.startswith(f'Lost the LLM server at {srv.url} after 4 attempts') and 'KGQA_LLM_BASE_URL' in msg


def test_timeouts_in_a_row_say_so():
    with ReplayServer(echo, faults=Faults(rate_timeout=1.0, hang=3.0)) as srv:
        b = client(srv, retries=1, backoff=0.01, timeout=0.3)
        with pytest.raises(LLMUnavailableError) as e:
            b.complete('q')
    assert 'did not answer within 0.3 s, 2 attempts in a row' in str(e.value) and b.retried == {'timeout': 1}


def test_persistent_429_is_a_call_error_and_refusals_are_not_retried():
    with ReplayServer(echo, faults=Faults(rate_429=1.0)) as srv:
        b = client(srv, retries=2, backoff=0.01)
        with pytest.raises(LLMCallError) as e:
            b.complete('q')
    assert 'kept failing after 3 attempts (last: HTTP 429)' in str(e.value) and b.retried == {'429': 2}
    with ReplayServer() as srv:  # no script, no cache: every prompt is a 404
        b = client(srv)
        with pytest.raises(LLMCallError) as e:
            b.complete('q')
    assert 'HTTP 404' in str(e.value) and not b.retried and srv.stats['requests'] == 1


def test_requests_per_minute_limit_holds_back_on_the_client():
    with ReplayServer(echo, slots=8) as srv:
        b = client(srv)
        b.limiter = RateLimiter(requests_per_minute=4, window=1.0)  # 4 a second, for the test
        t = time.perf_counter()
        b.complete_many(PROMPTS[:10], max_workers=10)
        took = time.perf_counter() - t
    assert took >= 2.0 and b.limiter.waited > 0 and not b.retried  # 4 + 4 + 2: two full windows waited


def test_tokens_per_minute_counts_the_real_usage():
    with ReplayServer(echo) as srv:
        b = client(srv, tokens_per_minute=10_000)
        c = b.complete('three words here')
    (_, tokens), = b.limiter._events
    assert tokens == c.prompt_tokens + c.completion_tokens == 3 + 5  # not the estimate (16 // 4 + 256)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_command_line(tmp_path):
    from kgqa_nb.llm.base import Decoding, FakeBackend
    from kgqa_nb.llm.cache import CachedBackend
    cache = tmp_path/'responses.sqlite'
    recorded = CachedBackend(FakeBackend(lambda p: 'from the cache', model='m'), cache)
    recorded.complete('cached prompt', Decoding(max_tokens=9))
    port = free_port()
    proc = subprocess.Popen([sys.executable, '-m', 'kgqa_nb.llm.replay', '--cache', str(cache), '--default', 'fallback',
                             '--port', str(port), '--slots', '2'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=Path(__file__).parents[1], text=True)
    try:
        url = f'http://127.0.0.1:{port}/v1'
        for _ in range(200):
            try:
                with urllib.request.urlopen(url + '/models', timeout=1): break
            except OSError: time.sleep(0.1)
        b = OpenAIBackend('m', base_url=url, retries=0)
        assert b.complete('cached prompt', Decoding(max_tokens=9)).text == 'from the cache'
        assert b.complete('anything else').text == 'fallback'
    finally:
        proc.terminate(); proc.wait(10)
    assert f'replay server at {url}' in proc.stdout.read()
