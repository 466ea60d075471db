"""Concurrent questions (`run_pipeline(..., concurrency=k)`) through the replay server (`kgqa_nb.llm.replay`) on the mini
MetaQA folder, with a scripted model that writes each question's gold program (every third one with a relation slip
that grounding has to repair, asking the LLM): the records and the summary are the sequential run's, every question
is written exactly once, and faults (429 storms, dropped connections, a server killed and restarted, one that stays
down) lose nothing."""
import ast, copy, re, time
from dataclasses import replace
import pytest

from kgqa_nb.core import read_jsonl
from kgqa_nb.llm.base import LLMUnavailableError
from kgqa_nb.llm.openai import OpenAIBackend
from kgqa_nb.datasets.metaqa import write_mini_metaqa
from kgqa_nb.programs.prompts import CODEALIGN_ANSWER_START, codealign_steps
from kgqa_nb.llm.replay import Faults, ReplayServer

MODEL = 'replay-gold'


def scripted_gold(questions):
    "The model: for the question asked last in a pipeline prompt, its gold program ('directed_by' written 'director' "
    "for every third question); for a grounding prompt, 'directed_by' when listed, else the first candidate."
    by_text = {q.question: (i, q.program) for i, q in enumerate(questions)}
    def answer(prompt: str) -> str:
        if prompt.startswith('From the '):  # `kgqa_nb.programs.prompts.grounding_prompt`
            listed = ast.literal_eval(re.search(r'_list = (\[.*\])\n', prompt).group(1))
            return 'directed_by' if 'directed_by' in listed else listed[0]
        text = max(by_text, key=prompt.rfind)
        i, program = by_text[text]
        out = codealign_steps(program)[len(CODEALIGN_ANSWER_START):]
        return out.replace("'directed_by'", "'director'") if i % 3 == 0 else out
    return answer


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    from kgqa_nb.systems.experiments import experiment_config
    from kgqa_nb.llm.base import FakeBackend
    from kgqa_nb.datasets.metaqa_stages import metaqa_questions, metaqa_stages
    root = write_mini_metaqa(tmp_path_factory.mktemp('metaqa'))
    qs = metaqa_questions(n_per_hop=8, root=root)
    st = metaqa_stages(FakeBackend(default=''), exclude=[q.question for q in qs], root=root, pool_size=60)
    st.grounder.cache = None  # no decision cache: every run asks the LLM the same grounding questions
    return qs, experiment_config('codealign'), st, scripted_gold(qs)


def served(st, srv: ReplayServer, **kw):
    "The stages with the LLM (pipeline and grounder) served by `srv`."
    b = OpenAIBackend(MODEL, base_url=srv.url, **{'retries': 8, 'backoff': 0.05, 'max_backoff': 1.0, **kw})
    g = copy.copy(st.grounder)
    g.backend = b
    return replace(st, backend=b, grounder=g), b


def stable(r: dict) -> dict:
    "A record without its wall-clock seconds."
    out = {k: v for k, v in r.items() if k != 'timings'}
    out['decisions'] = [{k: v for k, v in d.items() if k != 'seconds'} for d in r.get('decisions') or []]
    return out


def figures(s: dict) -> dict: return {k: v for k, v in s['all'].items() if k not in ('seconds', 'seconds_by_stage')}


@pytest.fixture(scope='module')
def sequential(setup, tmp_path_factory):
    from kgqa_nb.systems.pipeline import run_pipeline
    qs, cfg, st, answer = setup
    with ReplayServer(answer, model=MODEL) as srv:
        stages, _ = served(st, srv)
        recs = run_pipeline(qs, cfg, stages, tmp_path_factory.mktemp('seq')/'records.jsonl', progress=False)
    return recs


def written_once(path, qs) -> bool:
    ids = [r['id'] for r in read_jsonl(path)]
    return sorted(ids) == sorted(q.id for q in qs)


def test_sequential_run_is_right(sequential):
    from kgqa_nb.stages.grounding import needed_grounding
    from kgqa_nb.systems.pipeline import summarize
    s = summarize(sequential)['all']
    assert s['n'] == 24 and s['crashed'] == 0 and s['ser'] == 0
    assert sum(needed_grounding(r['decisions']) for r in sequential) >= 4  # the slips went through grounding


def test_concurrent_run_equals_sequential(setup, sequential, tmp_path):
    from kgqa_nb.systems.pipeline import run_pipeline, summarize
    qs, cfg, st, answer = setup
    with ReplayServer(answer, model=MODEL, latency=0.05, slots=8) as srv:
        stages, _ = served(st, srv)
        recs = run_pipeline(qs, cfg, stages, tmp_path/'records.jsonl', progress=False, concurrency=8)
    assert srv.max_in_flight > 1  # questions really overlapped
    assert [stable(r) for r in recs] == [stable(r) for r in sequential]
    assert figures(summarize(recs)) == figures(summarize(sequential))
    assert written_once(tmp_path/'records.jsonl', qs)


def test_fault_storm_loses_nothing(setup, sequential, tmp_path):
    from kgqa_nb.systems.pipeline import run_pipeline, summarize
    qs, cfg, st, answer = setup
    faults = Faults(rate_429=0.3, rate_500=0.05, rate_drop=0.05, retry_after=0.05, seed=3)
    with ReplayServer(answer, model=MODEL, latency=0.02, slots=8, faults=faults) as srv:
        stages, b = served(st, srv, retries=12)
        recs = run_pipeline(qs, cfg, stages, tmp_path/'records.jsonl', progress=False, concurrency=8)
    assert srv.stats['429'] >= 5 and sum(b.retried.values()) == srv.stats['429'] + srv.stats['500'] + srv.stats['drop']
    assert figures(summarize(recs)) == figures(summarize(sequential)) and written_once(tmp_path/'records.jsonl', qs)


def test_server_killed_mid_run_and_restarted(setup, sequential, tmp_path):
    import threading
    from kgqa_nb.systems.pipeline import run_pipeline, summarize
    qs, cfg, st, answer = setup
    with ReplayServer(answer, model=MODEL, latency=0.2, slots=4) as srv:
        stages, b = served(st, srv, backoff=0.3, max_backoff=2.0)
        threading.Timer(1.0, lambda: srv.down_for(1.5)).start()
        recs = run_pipeline(qs, cfg, stages, tmp_path/'records.jsonl', progress=False, concurrency=4)
    assert b.retried['connection'] >= 1
    assert figures(summarize(recs)) == figures(summarize(sequential)) and written_once(tmp_path/'records.jsonl', qs)


def test_server_that_stays_down_stops_the_run_and_a_rerun_finishes(setup, sequential, tmp_path):
    import threading
    from kgqa_nb.systems.pipeline import run_pipeline, summarize
    qs, cfg, st, answer = setup
    path = tmp_path/'records.jsonl'
    srv = ReplayServer(answer, model=MODEL, latency=0.2, slots=4).start()
    stages, _ = served(st, srv, retries=2, backoff=0.05)
    threading.Timer(1.0, srv.stop).start()
    t = time.perf_counter()
    with pytest.raises(LLMUnavailableError) as e:
        run_pipeline(qs, cfg, stages, path, progress=False, concurrency=4)
    saved = len(list(read_jsonl(path)))
    msg = str(e.value)
    assert msg.startswith(f'Lost the LLM server at {srv.url} after 3 attempts') and time.perf_counter() - t < 30
    assert f'The run stopped: {saved} of the 24 questions' in msg and str(path) in msg and 0 < saved < 24
    srv.start()  # back on the same port: the rerun answers only the others
    try: recs = run_pipeline(qs, cfg, stages, path, progress=False, concurrency=4)
    finally: srv.stop()
    assert srv.stats['answered'] > 0 and written_once(path, qs)
    assert figures(summarize(recs)) == figures(summarize(sequential))
