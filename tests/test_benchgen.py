"""Proofs for the question generator (kgqa_nb.datasets.benchgen): every generated program of the demo benchmark,
of the adversarial fixture KB and of a Complex MetaQA sample runs, in our executor and in the official
`kopl` engine, to the stored answer; the gold programs score 100%; the program-free baseline scores low;
the files are KQA Pro's format. The benchmark statistics notebook is smoke-tested with small parameters."""
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from kgqa_nb.datasets import benchgen as bg
from kgqa_nb.core import data_dir, package_data
from kgqa_nb.kopl.executor import KoPLExecutor
from kgqa_nb.kopl.functions import FUNCTIONS, check_program
from kgqa_nb.kg.store import from_kopl_dict, load_kb, to_old_schema
from kgqa_nb.kopl.reference import KoPLReference

DEMO_N = 200  # questions per category of the demo benchmark under test
METAQA_N = 60  # questions per category of the Complex MetaQA build under test
METAQA_SAMPLE = 200  # of which this many are run through the official engine


def matches(answer, stored: str) -> bool:
    "An engine's answer (a string, or a list of strings) is exactly the stored single answer."
    return answer == stored or (isinstance(answer, list) and answer == [stored])


def all_questions(splits: dict) -> list[dict]:
    return [q for s in bg.SPLITS for q in splits[s]]


@pytest.fixture(scope='module')
def demo():
    kb = bg.demo_kb_dict()
    return kb, bg.generate_benchmark(kb, DEMO_N, seed=0)


@pytest.fixture(scope='module')
def metaqa(tmp_path_factory):
    data_dir('metaqa/kb.txt')  # no data: skipped outside CI (conftest), a failure in CI
    folder = bg.complex_metaqa(METAQA_N, seed=0, cache=tmp_path_factory.mktemp('cache'))
    kb = json.loads((folder/'kb.json').read_text(encoding='utf-8'))
    return folder, kb, {s: bg.load_kqapro_split(folder, s) for s in bg.SPLITS}


# ---- the demo benchmark ----

def test_demo_programs_run_to_the_stored_answer_in_ours_and_kopl(demo):
    kb, splits = demo
    qs = all_questions(splits)
    assert len(qs) >= 6 * DEMO_N * 0.9
    ours, ref = KoPLExecutor(from_kopl_dict(kb)), KoPLReference(kb)
    bad_ours = [q['question'] for q in qs if not matches(ours.answer(q['program']), q['answer'])]
    bad_kopl = [q['question'] for q in qs if not matches(ref.answer(q['program']), q['answer'])]
    assert not bad_ours and not bad_kopl, (bad_ours[:3], bad_kopl[:3])


def test_demo_covers_every_function_and_category(demo):
    _, splits = demo
    qs = all_questions(splits)
    used = Counter(step['function'] for q in qs for step in q['program'])
    assert set(used) == set(FUNCTIONS), sorted(set(FUNCTIONS) - set(used))
    assert Counter(q['category'] for q in qs) == {c: DEMO_N for c in bg.GENERATED_CATEGORIES}
    for s in bg.SPLITS: assert {q['category'] for q in splits[s]} == set(bg.GENERATED_CATEGORIES)


def test_demo_gold_programs_score_100_and_the_program_free_baseline_scores_low(demo):
    kb, splits = demo
    ex = KoPLExecutor(from_kopl_dict(kb))
    assert bg.gold_program_accuracy(ex, all_questions(splits)).value == 1.0
    base = bg.program_free_baseline(splits['train'], splits['val'] + splits['test'])
    print({c: round(s.value, 3) for c, s in base.items()})
    assert base['Overall'].value < 0.25
    assert base['Verify'].value < 0.65  # yes/no: balanced by construction
    assert all(base[c].value < 0.25 for c in bg.GENERATED_CATEGORIES if c != 'Verify')


def test_demo_records_are_kqapro_records(demo):
    _, splits = demo
    for q in all_questions(splits):
        assert set(q) >= {'question', 'program', 'choices', 'answer', 'category'}
        check_program(q['program'])  # well formed, dependencies explicit and consistent
        assert all(set(step) == {'function', 'inputs', 'dependencies'} for step in q['program'])
        assert len(q['choices']) == 10 and q['answer'] in q['choices']
        if q['answer_type'] == 'boolean': assert q['choices'] == ['yes', 'no'] + ['unknown'] * 8
        else: assert len(set(q['choices'])) == 10
        assert q['question'][0].isupper() and q['question'][-1] in '?.'
    assert len({q['question'] for q in all_questions(splits)}) == len(all_questions(splits))


def test_demo_phrasing_is_diverse(demo):
    _, splits = demo
    qs = all_questions(splits)
    skeletons = {q['skeleton'] for q in qs}
    assert len(skeletons) > 0.5 * len(qs)
    for c in bg.GENERATED_CATEGORIES:
        assert len({q['skeleton'] for q in qs if q['category'] == c}) >= 20, c


def test_generation_is_deterministic_and_reads_either_kb_schema(demo):
    kb, splits = demo
    small = bg.generate_benchmark(kb, 30, seed=3)
    assert bg.generate_benchmark(kb, 30, seed=3) == small
    assert bg.generate_benchmark(to_old_schema(kb), 30, seed=3) == small  # KQA Pro's older kb.json schema
    assert bg.generate_benchmark(kb, 30, seed=4) != small


def test_written_folder_is_read_by_our_loaders_and_kopl(demo, tmp_path):
    kb, splits = demo
    folder = bg.write_benchmark(tmp_path/'demo', kb, splits)
    assert sorted(p.name for p in folder.iterdir()) == ['kb.json', 'test.json', 'train.json', 'val.json']
    test = bg.load_kqapro_split(folder, 'test')
    assert [q['question'] for q in test] == [q['question'] for q in splits['test']]
    ours, ref = KoPLExecutor(load_kb(folder/'kb.json')), KoPLReference.from_file(folder/'kb.json')
    for q in test[:100]:
        assert matches(ours.answer(q['program']), q['answer']) and matches(ref.answer(q['program']), q['answer'])


def test_demo_benchmark_is_cached(tmp_path):
    first = bg.demo_benchmark(20, seed=0, cache=tmp_path)
    stamp = (first/'train.json').stat().st_mtime_ns
    assert bg.demo_benchmark(20, seed=0, cache=tmp_path) == first and (first/'train.json').stat().st_mtime_ns == stamp


def test_official_kqapro_test_split_loads():
    test = bg.load_kqapro_split(data_dir('kqapro'), 'test')
    assert len(test) == 11797
    assert all(q['answer'] is None and q['program'] is None and len(q['choices']) == 10 for q in test)


def test_loader_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match='train.json'): bg.load_kqapro_split(tmp_path, 'train')
    (tmp_path/'val.json').write_text('{"question": "x"}')
    with pytest.raises(bg.DatasetFormatError, match='val.json'): bg.load_kqapro_split(tmp_path, 'val')


# ---- the adversarial fixture KB (duplicate names, concept-named entities, year/date mixes) ----

def test_fixture_programs_run_to_the_stored_answer_in_ours_and_kopl():
    kb = json.loads(package_data('fixture_kb.json').read_text())
    qs = all_questions(bg.generate_benchmark(kb, 100, seed=0))
    used = {step['function'] for q in qs for step in q['program']}
    assert used == set(FUNCTIONS)
    ours, ref = KoPLExecutor(from_kopl_dict(kb)), KoPLReference(kb)
    for q in qs:
        assert matches(ours.answer(q['program']), q['answer']), q['question']
        assert matches(ref.answer(q['program']), q['answer']), q['question']


# ---- Complex MetaQA ----

def test_metaqa_conversion_keeps_every_triple(metaqa):
    folder, kb, _ = metaqa
    triples = {tuple(l.split('|')) for l in data_dir('metaqa/kb.txt').read_text(encoding='utf-8').splitlines() if l.strip()}
    names = {h for h, _, _ in triples} | {t for _, r, t in triples if r in bg.METAQA_RELATIONS}
    assert len(kb['entities']) == len(names)
    kg = load_kb(folder/'kb.json')
    stats = kg.stats()
    by_rel = Counter(r for _, r, _ in triples)
    assert stats['relation_facts'] == 2 * sum(by_rel[r] for r in bg.METAQA_RELATIONS)  # stored in both directions
    assert stats['attribute_facts'] == sum(by_rel[r] for r in bg.METAQA_ATTRIBUTES)
    assert kg.key_type['publication date'] == 'date' and kg.key_type['language'] == 'string'  # years are time values
    genres = {t for _, r, t in triples if r == 'has_genre'}
    assert genres <= set(kg.concept_names) and {'film director', 'screenwriter', 'actor', 'tag'} <= set(kg.concept_names)


def test_metaqa_sample_runs_to_the_stored_answer_in_ours_and_kopl(metaqa):
    folder, kb, splits = metaqa
    qs = all_questions(splits)
    assert Counter(q['category'] for q in qs) == {c: METAQA_N for c in bg.METAQA_CATEGORIES}
    ours = KoPLExecutor(load_kb(folder/'kb.json'))
    assert all(matches(ours.answer(q['program']), q['answer']) for q in qs)
    sample = random.Random(0).sample(qs, min(METAQA_SAMPLE, len(qs)))
    ref = KoPLReference(kb)
    bad = [q['question'] for q in sample if not matches(ref.answer(q['program']), q['answer'])]
    assert not bad, bad[:3]


def test_metaqa_questions_use_real_names_and_score_as_expected(metaqa):
    folder, kb, splits = metaqa
    names = {e['name'] for e in kb['entities'].values()}
    assert all(len(q['choices']) == 10 and q['answer'] in q['choices'] for q in all_questions(splits))
    finds = [step['inputs'][0] for q in all_questions(splits) for step in q['program'] if step['function'] == 'Find']
    assert finds and all(n in names for n in finds)
    base = bg.program_free_baseline(splits['train'], splits['val'] + splits['test'])
    print({c: round(s.value, 3) for c, s in base.items()})
    assert base['Overall'].value < 0.3


# ---- the statistics notebook (papermill, small parameters) ----

def test_stats_notebook_smoke(tmp_path):
    pm = pytest.importorskip('papermill')
    nb = Path(__file__).parents[1]/'nbs'/'experiments'/'benchgen_stats.ipynb'
    pm.execute_notebook(str(nb), str(tmp_path/'out.ipynb'), cwd=str(nb.parent), progress_bar=False, kernel_name='python3', language='python',
                        parameters={'demo_n': 20, 'metaqa_n': 0, 'levels_demo_n': 20, 'levels_metaqa_n': 0,
                                    'out_dir': str(tmp_path), 'cache': str(tmp_path/'cache')})
    md = (tmp_path/'benchgen_stats.md').read_text()
    assert 'Questions per category' in md and 'Multi-hop' in md
    assert 'demo_n=20,' in md  # the parameters reached the notebook (its cell tagged `parameters` survived cleaning)
    assert (tmp_path/'benchgen_stats.csv').exists()


def test_only_our_errors_drop_a_draft_and_they_are_counted(demo):
    "The generator drops a draft only on the executor's own errors (counted); any other exception is a bug and raised."
    kb, splits = demo
    dropped = Counter()
    assert bg.generate_benchmark(kb, DEMO_N, seed=0, dropped=dropped) == splits  # the same benchmark
    assert sum(dropped.values()) == 0  # no template writes a program the executor rejects
    ex = KoPLExecutor(from_kopl_dict(kb))
    rejected = bg.Draft('Count', 'test', [('FindAll', []), ('FilterNum', ['height', 'tall', '>']), ('Count', [])],
                        'How many?', [], 'count')
    assert bg.checked_answer(ex, rejected, dropped) is None and dropped == Counter(InvalidInputError=1)

    class Buggy:
        kg = ex.kg
        def run(self, program, trace=False): raise KeyError('a bug')
        def answer(self, program): raise KeyError('a bug')
    with pytest.raises(KeyError): bg.checked_answer(Buggy(), rejected)
    errors = Counter()
    nope = [dict(function='Nope', inputs=[], dependencies=[])]
    qs = all_questions(splits)[:5] + [dict(question='?', answer='x', program=nope)]
    assert bg.gold_program_accuracy(ex, qs, errors).correct == 5 and errors == Counter(UnknownFunctionError=1)
    with pytest.raises(KeyError): bg.gold_program_accuracy(Buggy(), qs[:1])
