"""A rerun from the response cache reports the original run's latency (kgqa_nb.llm, kgqa_nb.systems.pipeline), and a
local llama.cpp model is closed before interpreter teardown (no destructor traceback at exit)."""
import json, sqlite3, subprocess, sys, threading
from dataclasses import replace
from pathlib import Path

import pytest

from kgqa_nb.core import data_dir
from kgqa_nb.llm.base import Decoding, FakeBackend, LLMBackend, LLMUnavailableError, usage_summary
from kgqa_nb.llm.cache import CachedBackend, ResponseCache
from kgqa_nb.llm.llamacpp import LlamaCppBackend, close_local_models
import kgqa_nb.llm.llamacpp as llamacpp

GOOD = ("expression_1 = FIND('Tom Hanks', expression_1)\n"
        "expression_1 = RELATE('starred_actors', 'backward', expression_1)\n"
        "expression_1 = WHAT(expression_1)\nexpression_1 = STOP(expression_1)")


class Timed(FakeBackend):
    "A scripted model whose every call takes 1.5 s, 0.25 s of it reading the prompt."
    def _complete(self, prompt, decoding):
        return replace(super()._complete(prompt, decoding), seconds=1.5, prompt_seconds=0.25)


def test_cache_hit_replays_the_original_timings(tmp_path):
    first = CachedBackend(Timed(lambda p: 'x'), tmp_path/'c.sqlite').complete('q')
    again = CachedBackend(FakeBackend([]), tmp_path/'c.sqlite').complete('q')  # another process: only the file
    assert not first.cached and first.lookup_seconds is None
    assert again.cached and again.text == 'x' and again.lookup_seconds is not None
    assert (again.seconds, again.prompt_seconds, again.generation_seconds) == (1.5, 0.25, 1.25)
    assert usage_summary([first, again])['seconds'] == 3.0


def test_complete_many_duplicate_replays_too(tmp_path):
    cached = CachedBackend(Timed(lambda p: 'x'), tmp_path/'c.sqlite')
    out = cached.complete_many(['a', 'b', 'a'])
    assert [c.cached for c in out] == [False, False, True] and [c.seconds for c in out] == [1.5] * 3


def test_old_cache_rows_keep_the_split_unknown(tmp_path):
    "A cache file written before the timings table existed: the total is the stored one, the split is unknown."
    db = sqlite3.connect(tmp_path/'old.sqlite')
    db.execute('CREATE TABLE completions (key TEXT PRIMARY KEY, model TEXT, prompt TEXT, decoding TEXT, text TEXT, '
               'prompt_tokens INTEGER, completion_tokens INTEGER, seconds REAL, finish_reason TEXT, created REAL)')
    db.execute('INSERT INTO completions VALUES (?,?,?,?,?,?,?,?,?,?)',
               (ResponseCache.key('fake', 'q', Decoding()), 'fake', 'q', json.dumps(Decoding().as_dict()), 'old', 3, 1,
                4.0, 'stop', 0.0))
    db.commit(); db.close()
    c = CachedBackend(FakeBackend([]), tmp_path/'old.sqlite').complete('q')
    assert c.cached and c.seconds == 4.0 and c.prompt_seconds is None and c.generation_seconds is None


def test_pipeline_rerun_from_cache_reports_the_same_seconds(tmp_path):
    from kgqa_nb.kopl.executor import KoPLExecutor
    from kgqa_nb.kg.store import load_kb
    from kgqa_nb.datasets.metaqa import execute_without_topic
    from kgqa_nb.systems.pipeline import PipelineConfig, Question, Stages, run_pipeline, summarize
    from kgqa_nb.programs.prompts import Demo

    class Linked:  # the shape of kgqa_nb.stages.linking.Linked
        def __init__(self, q):
            self.entities, self.concepts, self.mode = [q.split('[')[1].split(']')[0]], [], 'realistic'

    demo = Demo('what movies did [Tom Hanks] star in', [dict(function='Find', inputs=['Tom Hanks'], dependencies=[]),
                dict(function='Relate', inputs=['starred_actors', 'backward'], dependencies=[0]),
                dict(function='What', inputs=[], dependencies=[1])], ['Tom Hanks'], [], id='demo-1')
    kg = load_kb(data_dir('metaqa/kb.txt'))
    ex = lambda executor, program, q, linked: execute_without_topic(executor, program, linked.entities[0])
    qs = [Question('t-1', 'which films did [Tom Hanks] act in', ['Big'], dataset='test')]
    cfg = PipelineConfig(facts=False, correction=0, grounding=False)
    def stages(model):
        return Stages(CachedBackend(model, tmp_path/'c.sqlite'), KoPLExecutor(kg), Linked, demos=[demo], execute=ex)
    first = run_pipeline(qs, cfg, stages(Timed(lambda p: GOOD)), tmp_path/'a.jsonl', progress=False)
    again = run_pipeline(qs, cfg, stages(FakeBackend([])), tmp_path/'b.jsonl', progress=False)  # all from the cache
    assert [a['cached'] for a in first[0]['attempts']] == [False]
    assert [a['cached'] for a in again[0]['attempts']] == [True]
    assert first[0]['llm']['cached'] == 0 and again[0]['llm']['cached'] == 1
    for stage, seconds in (('llm_prompt', 0.25), ('llm_generation', 1.25)):
        assert first[0]['timings'][stage] == again[0]['timings'][stage] == seconds
    s1, s2 = summarize(first)['test']['seconds_by_stage'], summarize(again)['test']['seconds_by_stage']
    assert (s1['llm_prompt'], s1['llm_generation']) == (s2['llm_prompt'], s2['llm_generation']) == (0.25, 1.25)


class _Llama:  # what LlamaCppBackend.close touches of llama_cpp.Llama
    def __init__(self): self.closed, self._sampler = False, _Sampler()
    def close(self): self.closed = True


class _Sampler:
    def __init__(self): self.closed = False
    def close(self): self.closed = True


def test_close_frees_the_model_and_its_last_sampler():
    b = LlamaCppBackend.__new__(LlamaCppBackend)  # no model file: what close() and complete() need
    LLMBackend.__init__(b)
    b.model, b._lock, b._states, b._grammars, b._matchers = 'stand-in', threading.Lock(), [], {}, {}
    b.llm = fake = _Llama()
    sampler = fake._sampler
    llamacpp._OPEN_LOCAL_MODELS.add(b)
    close_local_models()  # what atexit runs
    assert fake.closed and sampler.closed and b.closed and b not in llamacpp._OPEN_LOCAL_MODELS
    b.close()  # again: nothing
    with pytest.raises(LLMUnavailableError, match='closed'): b.complete('x')


def test_no_traceback_when_a_process_with_a_local_model_exits(tmp_path):
    pytest.importorskip('llama_cpp', reason='needs llama-cpp-python (scripts/install_llm.sh)')
    script = ("from kgqa_nb.llm.base import Decoding; from kgqa_nb.llm.presets import get_backend\n"
              "b = get_backend('smollm2-135m', cache=False, n_ctx=256)\n"
              "print(b.complete('def add(a, b):', Decoding(max_tokens=4, grammar='root ::= \"return\"')).text)\n")
    r = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).parent)
    assert r.returncode == 0 and r.stdout.strip() == 'return', r.stderr
    assert 'Traceback' not in r.stderr and 'Exception ignored' not in r.stderr, r.stderr
