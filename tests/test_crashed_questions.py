"""A question the pipeline crashed on stays in the denominator (kgqa_nb.systems.pipeline, kgqa_nb.datasets.kqapro, kgqa_nb.eval.report): it is
a miss in Hits@1, summaries show planned / answered / crashed counts, and tables of runs without crashes are unchanged."""
import json
from pathlib import Path

import pytest

from kgqa_nb.systems.pipeline import (PipelineConfig, Question, failure_table, is_crashed, question_counts, read_records,
                              summarize, summary_table)
from kgqa_nb.eval.report import constrained_rows, pipeline_ablation_rows, read_run
from kgqa_nb.datasets.kqapro import kqapro_rescore
from kgqa_nb.systems.pipeline import NAMED_CONFIGS

ROOT = Path(__file__).resolve().parents[1]


def record(qid: str, hit: float, dataset: str = 'd', config: dict | None = None) -> dict:
    "A completed record with the fields `summarize` reads."
    return dict(id=qid, dataset=dataset, config=config or {}, model='m', hit=hit, expected_hit=hit, any_hit=hit,
                attempts=[dict(kind='generate', ok=True, finish='stop')], valid=True, decisions=[], error=None,
                prediction=['x'], timings={'llm_generation': 1.0}, llm=dict(calls=1, cached=0, prompt_tokens=10,
                completion_tokens=5), constraint=dict(level='off', dropped=False))


def crashed(qid: str, dataset: str = 'd', config: dict | None = None) -> dict:
    return dict(id=qid, dataset=dataset, config=config or {}, model='m', status='crashed', error='IndexError: x',
                question='q', gold=['a'])


def test_crash_is_a_miss_and_is_counted():
    s = summarize([record('1', 1.0), record('2', 1.0), crashed('3')], questions=[Question(str(i), 'q', dataset='d')
                                                                               for i in range(1, 6)])
    f = s['d']
    assert (f['n'], f['planned'], f['answered'], f['crashed']) == (3, 5, 2, 1)
    assert f['hits_at_1'] == round(100 * 2 / 3, 2) and f['any_hit'] == f['hits_at_1']
    assert f['seconds'] == 1.0 and f['ser'] == 0.0 and f['llm_calls'] == 1.0  # what the pipeline did: answered only


def test_summary_without_crashes_is_unchanged():
    recs = [record('1', 1.0), record('2', 0.0)]
    f = summarize(recs)['d']
    assert (f['n'], f['planned'], f['answered'], f['crashed']) == (2, 2, 2, 0) and f['hits_at_1'] == 50.0
    table = summary_table({'c': summarize(recs)})
    assert list(table.columns)[-1] == 'output tok/q' and 'crashed' not in table.columns
    with_crash = summary_table({'c': summarize(recs), 'k': summarize(recs + [crashed('3')])})
    assert with_crash[['planned', 'answered', 'crashed']].values.tolist() == [[2, 2, 0], [3, 2, 1]]
    assert question_counts({'n': 4}) == dict(planned=4, answered=4, crashed=0)


def test_committed_run_metaqa_tables_are_reproduced_byte_for_byte():
    "outputs/run_metaqa (no crash): its records give the committed summary, results and failure tables exactly."
    out = ROOT/'outputs'/'run_metaqa'
    m = json.loads((out/'metrics.json').read_text())
    cfg = PipelineConfig(**m['pipeline_config'])
    recs = list(read_records(out/'records.jsonl', cfg, crashed=True).values())
    assert len(recs) == m['questions_done'] and not any(map(is_crashed, recs))
    s = summarize(recs)
    new = ('planned', 'answered', 'crashed')
    assert {g: {k: v for k, v in f.items() if k not in new} for g, f in s.items()} == m['summary']
    table = summary_table({m['config_name']: s}, m['hops'])
    assert table.to_markdown(index=False) + '\n' == (out/'results.md').read_text()
    from kgqa_nb.datasets.metaqa_stages import metaqa_questions
    gold = {q.id: q.program for q in metaqa_questions(m['hops'], 100, m['seed'], 'dev')}
    failures = failure_table({m['config_name']: recs}, gold)
    assert failures.reset_index().rename(columns={'index': 'stage'}).to_markdown(index=False) + '\n' == \
        (out/'failures.md').read_text()


def test_run_pipeline_returns_crashes_and_retries_them(tmp_path):
    from kgqa_nb.kopl.executor import KoPLExecutor
    from kgqa_nb.kg.store import from_kopl_dict
    from kgqa_nb.core import package_data
    from kgqa_nb.llm.base import FakeBackend
    from kgqa_nb.systems.pipeline import Stages, run_pipeline

    def link(question):
        raise IndexError('a linker bug')

    kg = from_kopl_dict(json.loads(package_data('fixture_kb.json').read_text()))
    qs = [Question('a', 'q a', ['x'], dataset='d'), Question('b', 'q b', ['y'], dataset='d')]
    cfg = PipelineConfig(facts=False, correction=0, grounding=False, demos='manual')
    st = Stages(FakeBackend(default='x'), KoPLExecutor(kg), link, demos=[object()])
    recs = run_pipeline(qs, cfg, st, tmp_path/'r.jsonl', progress=False)
    assert [r['id'] for r in recs] == ['a', 'b'] and all(map(is_crashed, recs))
    assert recs[0]['error'] == 'IndexError: a linker bug' and recs[0]['gold'] == ['x']
    assert read_records(tmp_path/'r.jsonl') == {}  # nothing done: a rerun tries both again
    s = summarize(recs)['d']
    assert (s['n'], s['hits_at_1'], s['answered'], s['crashed'], s['ser']) == (2, 0.0, 0, 2, None)
    assert failure_table({'c': recs}, {}).loc['crashed', 'c'] == 2
    again = run_pipeline(qs, cfg, st, tmp_path/'r.jsonl', progress=False, max_new=1)
    assert len((tmp_path/'r.jsonl').read_text().splitlines()) == 3 and len(again) == 2


def test_experiment_readers_count_crashes(tmp_path):
    assert kqapro_rescore(crashed('x'))['status'] == 'crashed'
    fig = dict(n=3, hits_at_1=50.0, ci95=[9.5, 90.5], ser=0.0, seconds=1.0)
    assert 'crashed' not in read_run({'summary': {'all': fig}})[0][0]  # committed metrics: the columns they had
    rows = read_run({'summary': {'a': {**fig, 'planned': 4, 'answered': 2, 'crashed': 1}, 'b': fig}})[0]
    assert [(r['planned'], r['answered'], r['crashed']) for r in rows] == [(4, 2, 1), (3, 3, 0)]
    recs = {'off': [record('1', 1.0), record('2', 1.0)], 'kg': [record('1', 1.0), crashed('2')]}
    cr = constrained_rows(recs, {'off': PipelineConfig(), 'kg': PipelineConfig(constrain='kg')})
    assert [(r['n'], r['accuracy'], r['crashed']) for r in cr] == [(2, 100.0, 0), (2, 50.0, 1)]
    assert 'crashed' not in constrained_rows({'off': recs['off']}, {'off': PipelineConfig()})[0]
    full, abl = (NAMED_CONFIGS[n]('realistic').as_dict() for n in ('codealign', 'no_grounding'))
    lines = [record(f'q{k}', 1.0, 'metaqa-1hop', full) for k in range(4)]
    lines += [record('q0', 1.0, 'metaqa-1hop', abl), crashed('q1', 'metaqa-1hop', abl)]
    (tmp_path/'r.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in lines))
    ng = {r['group']: r for r in pipeline_ablation_rows(tmp_path/'r.jsonl') if r['config'] == 'no_grounding'}
    assert ng['metaqa-1hop']['n'] == 2 and ng['metaqa-1hop']['value'] == 50.0
    assert ng['metaqa-1hop']['note'] == 'same 2 question ids; crashed (counted as misses): no_grounding 1'
