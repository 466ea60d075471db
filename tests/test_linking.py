"Entity and concept linking: realistic linking on the whole demo benchmark, mention invariants, MetaQA topics and fallbacks, oracle mode."
import json
import random
import pytest

pytest.importorskip('spacy')
pytest.importorskip('rapidfuzz')

from kgqa_nb.datasets.benchgen import demo_benchmark, demo_kb_dict
from kgqa_nb.stages.facts import oracle_mentions
from kgqa_nb.kg.store import from_kopl_dict
from kgqa_nb.stages.linking import (EntityLinker, Linked, LinkingError, drop_a_letter, link_metaqa, link_oracle,
                             linking_scores, load_spacy)


@pytest.fixture(scope='module')
def kg():
    return from_kopl_dict(demo_kb_dict())


@pytest.fixture(scope='module')
def questions():
    folder = demo_benchmark()
    return [q for s in ('train', 'val', 'test') for q in json.loads((folder/f'{s}.json').read_text())]


@pytest.fixture(scope='module')
def linker(kg):
    return EntityLinker(kg)


@pytest.fixture(scope='module')
def linked(linker, questions):
    return linker.link_many([q['question'] for q in questions])


def test_whole_demo_benchmark_floor(questions, linked):
    scores = linking_scores(list(zip(linked, [link_oracle(q['program'], q['question']) for q in questions])))
    assert scores['entities']['precision'] > 0.95 and scores['entities']['recall'] > 0.95, scores
    assert scores['concepts']['precision'] > 0.85 and scores['concepts']['recall'] > 0.95, scores


def test_mentions_are_consistent(kg, questions, linked):
    entity_names = {n for n, c in zip(kg.names, kg.is_concept) if not c}
    concept_names = set(kg.concept_names)
    for q, l in zip(questions, linked):
        assert l.mode == 'realistic'
        spans = sorted((m['start'], m['end']) for m in l.mentions)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), q['question']  # no overlaps
        for m in l.mentions:
            assert q['question'][m['start']:m['end']] == m['text']
            assert m['name'] in (entity_names if m['kind'] == 'entity' else concept_names)
            assert m['how'] in ('exact', 'plural', 'alias', 'partial', 'acronym', 'demonym', 'fuzzy', 'embedding')
            assert 0 < m['score'] <= 1
        assert l.entities == list(dict.fromkeys(m['name'] for m in l.mentions if m['kind'] == 'entity'))
        json.dumps(l.as_dict())


def test_link_many_equals_link(linker, questions, linked):
    for q, l in list(zip(questions, linked))[:60]:
        assert linker.link(q['question']) == l


def test_typos_are_recovered_by_fuzzy_matching(kg, questions, linker):
    rng = random.Random(1)
    sample = rng.sample(questions, 200)
    noisy = [drop_a_letter(q['question'], oracle_mentions(q['program'])[0], rng) for q in sample]
    gold = [link_oracle(q['program']) for q in sample]
    fuzzy = linking_scores(list(zip(linker.link_many(noisy), gold)))['entities']
    exact = linking_scores(list(zip(EntityLinker(kg, fuzzy_threshold=None).link_many(noisy), gold)))['entities']
    assert fuzzy['recall'] > exact['recall'] + 0.4 and fuzzy['precision'] > 0.85


def test_oracle_mode_is_the_gold_program(questions):
    for q in questions:
        e, c = oracle_mentions(q['program'])
        l = link_oracle(q['program'], q['question'])
        assert (l.entities, l.concepts, l.mode) == (e, c, 'oracle')
        for m in l.mentions:
            assert m['how'] == 'gold' and (m['start'] == -1 or q['question'][m['start']:m['end']].lower() == m['name'].lower())


def test_metaqa_topics_and_fallback():
    from kgqa_nb.core import data_dir
    kb = data_dir('metaqa/kb.txt')
    from kgqa_nb.kg.store import load_kb
    from kgqa_nb.datasets.metaqa import load_metaqa_split
    mkg = load_kb(kb)
    qs = load_metaqa_split(1, 'dev')
    for q in qs[:2000]:
        l = link_metaqa(q.question, mkg)
        assert l.entities == [q.topic] and l.mentions[0]['how'] == 'verbatim'
        assert q.question[l.mentions[0]['start']:l.mentions[0]['end']] == q.topic
    ml = EntityLinker(mkg)
    l = link_metaqa('what movies did [Temuera Morisson] act in', mkg, ml)  # not a KG name: matched
    assert l.entities == ['Temuera Morrison'] and l.mentions[0]['how'] == 'fuzzy'
    assert link_metaqa('what movies did [Qqqqq Zzzzzz] act in', mkg, ml).entities == []
    assert link_metaqa('what movies did [Qqqqq Zzzzzz] act in', mkg).entities == []  # no matcher: nothing


def test_errors_and_cache(linker):
    assert load_spacy() is load_spacy()
    for bad in ['', '   ']:
        with pytest.raises(LinkingError): linker.link(bad)
        with pytest.raises(LinkingError): link_metaqa(bad)
    with pytest.raises(LinkingError): load_spacy('no_such_spacy_model')
    assert isinstance(linker.link('Nothing to see here.'), Linked)
