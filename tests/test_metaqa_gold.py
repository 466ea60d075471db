"""Gold MetaQA programs over the real MetaQA KB, on the full dev splits (9,992 / 14,872 / 14,274 questions).

Each question's gold KoPL program (Find(topic), one Relate per hop, What; see nbs/71_datasets.metaqa.ipynb) runs on
`KoPLExecutor(load_kb(data_dir('metaqa/kb.txt')))`. The claim: Hits@1 >= 99.9% on every hop, and every
question whose predicted set differs from the gold set is explained by one of the two known defects of
the data, never by the program:

* comma titles: the official answer files split a title such as "Paris, Texas" into `Paris` and `Texas`;
* merged films: kb.txt names a film by its title only, so films that share a title are one node whose
  facts are the union of theirs (1-hop questions about "Macbeth" get the years 1948 and 1971).

Run `pytest tests/test_metaqa_gold.py -s` to see the per-hop table.
"""
import time
import pytest
from kgqa_nb.core import data_dir
from kgqa_nb.kg.store import load_kb
from kgqa_nb.kopl.executor import KoPLExecutor
from kgqa_nb.datasets.metaqa import load_metaqa_split, execute_gold
from kgqa_nb.eval.metrics import multi_answer_scores

SIZES = {1: 9992, 2: 14872, 3: 14274}
_GOLD_RUNS: dict[int, tuple[list, list, float]] = {}  # hop -> (questions, execute_gold answers, seconds), shared by the tests


@pytest.fixture(scope='module')
def kb():
    t0 = time.perf_counter()
    kg = load_kb(data_dir('metaqa/kb.txt'))
    print(f'\nMetaQA KB loaded in {time.perf_counter() - t0:.1f} s: {kg}')
    return kg


def _comma_titles(kg) -> dict[str, list[str]]:
    "KB names with ', ' in them -> their comma-split pieces."
    return {n: n.split(', ') for n in kg.names if ', ' in n}


def _is_comma_title_case(pred: set, gold: set, comma: dict) -> bool:
    "The sets differ only because gold has a predicted comma title split into pieces."
    repaired = set(gold)
    for name in pred - gold:
        pieces = comma.get(name)
        if pieces and all(p in gold for p in pieces):
            repaired = (repaired - set(pieces)) | {name}
    return repaired != gold and repaired <= pred  # a merged film may come on top of a comma title


def _gold_runs(kb, hop: int):
    if hop not in _GOLD_RUNS:
        executor, questions = KoPLExecutor(kb), load_metaqa_split(hop, 'dev')
        t0 = time.perf_counter()
        preds = [execute_gold(executor, q) for q in questions]
        _GOLD_RUNS[hop] = (questions, preds, time.perf_counter() - t0)
    return _GOLD_RUNS[hop]


@pytest.mark.parametrize('hop', [1, 2, 3])
def test_gold_programs_reach_gold_answers(kb, hop):
    questions, preds, seconds = _gold_runs(kb, hop)
    assert len(questions) == SIZES[hop]
    scores = multi_answer_scores([q.answers for q in questions], preds)

    comma, n_comma, n_merged, unexplained = _comma_titles(kb), 0, 0, []
    for q, p in zip(questions, preds):
        pred, gold = set(p), set(q.answers)
        if pred == gold: continue
        if _is_comma_title_case(pred, gold, comma): n_comma += 1
        elif pred > gold: n_merged += 1
        else: unexplained.append((q.line, q.question, sorted(gold - pred)[:5], sorted(pred - gold)[:5]))
    first_misses = [q for q, p in zip(questions, preds) if not p or p[0] not in q.answers]

    print(f'\n{hop}-hop dev: {len(questions)} questions, {seconds:.1f} s ({len(questions)/seconds:,.0f} questions/s)')
    for k, v in scores.items(): print(f'  {k:18} {v}')
    print(f'  sets differ: {n_comma} comma-title, {n_merged} merged-film supersets, {len(unexplained)} unexplained')
    print(f'  first answer not gold: {len(first_misses)} questions', [q.line for q in first_misses[:10]])

    assert not unexplained, unexplained[:10]
    assert scores['Hits@1 (any)'].value >= 0.999
    if hop > 1:
        assert scores['Exact'].value == 1.0 and scores['Hits@1'].value == 1.0
    else:
        assert n_comma <= 5  # the data README counts 5 one-hop questions with split comma titles
        # merged films make the 1-hop sets too large; the executor's first answer is then gold by chance
        assert scores['Hits@1'].value >= 0.95 and scores['F1'].value >= 0.97


@pytest.mark.parametrize('hop', [1, 2, 3])
def test_system_scoring_matches_gold_rule(kb, hop):
    "`execute_without_topic` (no qtype needed) agrees with `execute_gold` except on name collisions; the plain path does not."
    from kgqa_nb.datasets.metaqa import execute_without_topic
    executor = KoPLExecutor(kb)
    questions, gold_runs, _ = _gold_runs(kb, hop)
    t0 = time.perf_counter()
    system_runs = [execute_without_topic(executor, q.program, q.topic) for q in questions]
    seconds = time.perf_counter() - t0
    plain_runs = [list(dict.fromkeys(executor.answer(q.program))) for q in questions]
    differ = [(q.line, q.question) for q, g, s in zip(questions, gold_runs, system_runs) if g != s]
    plain = multi_answer_scores([q.answers for q in questions], plain_runs)
    system = multi_answer_scores([q.answers for q in questions], system_runs)
    print(f'\n{hop}-hop dev, plain path programs (topic not dropped): ' +
          ', '.join(f'{k} {100*v.value:.2f}%' for k, v in plain.items()))
    print(f'{hop}-hop dev, execute_without_topic ({seconds:.1f} s): ' +
          ', '.join(f'{k} {100*v.value:.2f}%' for k, v in system.items()))
    print(f'  differs from execute_gold on {len(differ)} questions: {differ}')
    assert len(differ) <= 1  # 1-hop: the tag/film '9/11'; 2-hop: the writer/film 'Malcolm X'
    if hop > 1: assert plain['Exact'].value < 0.7  # dropping the topic is what the data does
