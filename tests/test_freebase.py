"""WebQSP on a Freebase endpoint (kgqa_nb.systems.freebase): CodeAlignKGQA's KoPL and KB-Coder's S-expressions run on a small
Freebase-shaped graph (names, an alias, a homonym, types, CVT nodes) in rdflib and embedded Oxigraph in-process, and on
the Oxigraph server and Virtuoso started by the tests; WebQSP F1/Hits@1 on hand-made records; run_webqsp's scoring
path end to end (model='fake', papermill) against Virtuoso.

Without an engine's program its tests skip with one reason (and fail under CI=true), as in tests/test_endpoints.py."""
import json
import socket
from pathlib import Path
import pytest
from test_endpoints import ENGINES, need_engine
from kgqa_nb.core import KGQAError, data_dir
from kgqa_nb.systems.freebase import (FreebaseNames, freebase_store, freebase_test_ntriples, gold_for, kopl_answers_freebase,
                              question_key, score_webqsp_record, score_webqsp_run, sexpr_answers_freebase,
                              webqsp_gold, webqsp_prf1, webqsp_scores)
from kgqa_nb.programs.sexpr_sparql import RdflibStore, SparqlEndpointError

NBS = Path(__file__).resolve().parents[1] / 'nbs' / 'experiments'


def prog(*steps) -> list[dict]:
    return [dict(function=f, inputs=list(i), dependencies=list(d)) for f, i, d in steps]


JAM = ('Find', ['Jamaica'], [])
LANGS = ('Relate', ['location.country.languages_spoken', 'forward'], [0])
CONTAINS = ('Relate', ['location.location.contains', 'forward'], [0])
CAST = [('Find', ['Coronation Street'], []), ('Relate', ['tv.tv_program.regular_cast', 'forward'], [0])]
KEN = [('Find', ['Ken Barlow'], []), ('Relate', ['tv.regular_tv_appearance.character', 'backward'], [0]),
       *CAST[:1], ('Relate', ['tv.tv_program.regular_cast', 'forward'], [2]), ('And', [], [1, 3]),
       ('Relate', ['tv.regular_tv_appearance.actor', 'forward'], [4]), ('QueryName', [], [5])]
BOTH_LANGS = ['Jamaican Creole English Language', 'Jamaican English']

# (name, KoPL program, answers, unnamed answers): every supported function, the CVT rules, names and languages
KOPL = [
    ('languages', [JAM, LANGS, ('QueryName', [], [1])], BOTH_LANGS, []),
    ('count', [JAM, LANGS, ('Count', [], [1])], ['2'], []),
    ('cvt constraints', KEN, ['William Roache'], []),
    ('ends on cvt', [*CAST, ('QueryName', [], [1])], ['m.0cvt1', 'm.0cvt2'], ['m.0cvt1', 'm.0cvt2']),
    ('topic left out', [('Find', ['Justin Bieber'], []), ('Relate', ['people.person.sibling_s', 'forward'], [0]),
                        ('Relate', ['people.sibling_relationship.sibling', 'forward'], [1]), ('Find', ['Male'], []),
                        ('Relate', ['people.person.gender', 'backward'], [3]), ('And', [], [2, 4]),
                        ('QueryName', [], [5])], ['Jaxon Bieber'], []),
    ('type by name', [JAM, CONTAINS, ('FilterConcept', ['City/Town'], [1]), ('QueryName', [], [2])],
     ['Kingston', 'Montego Bay'], []),
    ('type by id', [JAM, CONTAINS, ('FilterConcept', ['location.citytown'], [1]), ('QueryName', [], [2])],
     ['Kingston', 'Montego Bay'], []),
    ('select among', [JAM, CONTAINS, ('SelectAmong', ['topic_server.population_number', 'smallest'], [1])],
     ['Montego Bay'], []),
    ('select between', [('Find', ['Kingston'], []), ('Find', ['Montego Bay'], []),
                        ('SelectBetween', ['topic_server.population_number', 'greater'], [0, 1])], ['Kingston'], []),
    ('number =', [JAM, CONTAINS, ('FilterNum', ['topic_server.population_number', '110115', '='], [1]),
                  ('QueryName', [], [2])], ['Montego Bay'], []),
    ('number >', [JAM, CONTAINS, ('FilterNum', ['topic_server.population_number', '500000', '>'], [1]),
                  ('QueryName', [], [2])], ['Kingston'], []),
    ('year on cvt', [*CAST, ('FilterYear', ['tv.regular_tv_appearance.from', '1970', '<'], [1]),
                     ('Relate', ['tv.regular_tv_appearance.actor', 'forward'], [2]), ('QueryName', [], [3])],
     ['William Roache'], []),
    ('date', [*CAST, ('FilterDate', ['tv.regular_tv_appearance.from', '1972-01-01', '='], [1]),
              ('Relate', ['tv.regular_tv_appearance.actor', 'forward'], [2]), ('QueryName', [], [3])],
     ['Anne Kirkbride'], []),
    ('string by entity name', [*CAST, ('FilterStr', ['tv.regular_tv_appearance.character', 'Deirdre Barlow'], [1]),
                               ('Relate', ['tv.regular_tv_appearance.actor', 'forward'], [2]), ('QueryName', [], [3])],
     ['Anne Kirkbride'], []),
    ('attribute', [('Find', ['William Roache'], []), ('QueryAttr', ['people.person.date_of_birth'], [0])],
     ['1932-04-25'], []),
    ('alias, english name', [('Find', ['Patois'], []),
                             ('Relate', ['location.country.languages_spoken', 'backward'], [0]),
                             ('QueryName', [], [1])], ['Jamaica'], []),
    ('or', [('Find', ['Ken Barlow'], []), ('Find', ['Deirdre Barlow'], []), ('Or', [], [0, 1]),
            ('Relate', ['tv.regular_tv_appearance.character', 'backward'], [2]),
            ('Relate', ['tv.regular_tv_appearance.actor', 'forward'], [3]), ('QueryName', [], [4])],
     ['Anne Kirkbride', 'William Roache'], []),
    ('no such name', [('Find', ['Nobody'], []), LANGS, ('QueryName', [], [1])], [], []),
]

# (KB-Coder's S-expression as the LLM writes it, answers, the grounded S-expression that answered)
SEXPRS = [
    ('(JOIN location.country.languages_spoken "Jamaica")', BOTH_LANGS,
     '(JOIN (R location.country.languages_spoken) m.03_r3)'),
    ('(JOIN tv.regular_tv_appearance.actor (AND (JOIN tv.regular_tv_appearance.character "Ken Barlow") '
     '(JOIN tv.tv_program.regular_cast "Coronation Street")))', ['William Roache'],
     '(JOIN (R tv.regular_tv_appearance.actor) (AND (JOIN tv.regular_tv_appearance.character m.0kb) '
     '(JOIN (R tv.tv_program.regular_cast) m.01_2n)))'),
    ('(JOIN people.sibling_relationship.sibling (JOIN people.person.sibling_s "Justin Bieber"))',
     ['Jaxon Bieber', 'Jazmyn Bieber'],
     '(JOIN (R people.sibling_relationship.sibling) (JOIN (R people.person.sibling_s) m.06w2sn5))'),
    ('(COUNT (JOIN location.country.languages_spoken "Jamaica"))', ['2'],
     '(COUNT (JOIN (R location.country.languages_spoken) m.03_r3))'),
    ('(ARGMAX (JOIN location.location.contains "Jamaica") topic_server.population_number)', ['Kingston'],
     '(ARGMAX (JOIN (R location.location.contains) m.03_r3) topic_server.population_number)'),
    ('(AND location.citytown (JOIN location.location.contains "Jamaica"))', ['Kingston', 'Montego Bay'],
     '(AND location.citytown (JOIN (R location.location.contains) m.03_r3))'),
    ('(JOIN people.person.nationality "Nobody")', [], None),
]


@pytest.fixture(scope='module')
def graph_nt(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp('fb')/'freebase_test.nt'
    path.write_text(freebase_test_ntriples(), encoding='ascii')
    return path


def rdflib_store():
    import rdflib
    g = rdflib.Graph(); g.parse(data=freebase_test_ntriples(), format='nt')
    return RdflibStore(g)


def oxigraph_store():
    import pyoxigraph as ox
    from kgqa_nb.kopl.sparql import OxigraphStore
    st = ox.Store(); st.load(freebase_test_ntriples().encode(), format=ox.RdfFormat.N_TRIPLES)
    return OxigraphStore(st)


@pytest.fixture(scope='module', params=['rdflib', 'oxigraph-embedded', 'oxigraph', 'virtuoso'])
def names(request, graph_nt):
    "FreebaseNames on each store: two in-process, two servers started here."
    if request.param == 'rdflib': yield FreebaseNames(freebase_store(rdflib_store())); return
    if request.param == 'oxigraph-embedded': yield FreebaseNames(freebase_store(oxigraph_store())); return
    need_engine(request.param)
    with ENGINES[request.param][0](graph_nt) as server: yield FreebaseNames(freebase_store(server.store()))


@pytest.mark.parametrize('case', KOPL, ids=[c[0] for c in KOPL])
def test_kopl_on_freebase(names, case):
    _, program, expected, unnamed = case
    r = kopl_answers_freebase(names, prog(*program))
    assert r.error is None, r.message
    assert (r.answers, r.unnamed) == (expected, unnamed)


@pytest.mark.parametrize('case', SEXPRS, ids=[str(i) for i in range(len(SEXPRS))])
def test_kbcoder_sexpr_on_freebase(names, case):
    sexpr, expected, grounded = case
    r = sexpr_answers_freebase(names, sexpr)
    assert r.error is None, r.message
    assert (r.answers, r.grounded) == (expected, grounded)


def test_names_and_errors():
    names = FreebaseNames(freebase_store(rdflib_store()))
    assert names.ids('Jamaica') == ['m.03_r3', 'm.0jsong'] and names.ids('jamaica') == []  # exact names only
    r = kopl_answers_freebase(names, prog(('Find', ['Nobody'], []), ('QueryName', [], [0])))
    assert r.answers == [] and r.unresolved == ['Nobody'] and r.query is None
    for program, why in [([('FindAll', [], []), ('QueryName', [], [0])], 'every Freebase entity'),
                         ([('Find', ['Kingston'], []), ('Find', ['Jamaica'], []), ('QueryRelation', [], [0, 1])],
                          'QueryRelation'),
                         ([JAM, ('QueryAttr', ['a.b'], [0]), ('VerifyNum', ['3', '='], [1])],
                          'no Freebase counterpart'),
                         ([JAM, ('FilterNum', ['a.b', '3', '!='], [0]), ('QueryName', [], [1])], "'!='")]:
        r = kopl_answers_freebase(names, prog(*program))
        assert r.error in ('FreebaseError', 'SparqlError') and why in r.message, (program, r)
    assert sexpr_answers_freebase(names, '(JOIN a.b').error == 'SExprSyntaxError'


def test_unreachable_endpoint_is_raised_not_scored():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]  # closed when the block ends: nobody listens there
    dead = FreebaseNames(freebase_store(f'http://127.0.0.1:{port}/sparql'))
    with pytest.raises(SparqlEndpointError, match='unreachable'):
        kopl_answers_freebase(dead, prog(JAM, LANGS, ('QueryName', [], [1])))
    with pytest.raises(SparqlEndpointError, match='unreachable'):
        sexpr_answers_freebase(dead, '(JOIN location.country.languages_spoken m.03_r3)')
    with pytest.raises(SparqlEndpointError, match='unreachable'):
        score_webqsp_run([], 'codealign', f'http://127.0.0.1:{port}/sparql', gold_path='unused')
    with pytest.raises(KGQAError, match='http'):
        freebase_store('localhost:8890/sparql')


def test_webqsp_prf1_official_rules():
    assert webqsp_prf1(BOTH_LANGS, ['Jamaican English']) == dict(precision=0.5, recall=1.0, f1=2 / 3, hit=0.0)
    assert webqsp_prf1(['Jamaican English', 'X'], ['jamaican english '])['hit'] == 1.0  # case, spaces
    assert webqsp_prf1(['a', 'a'], ['a']) == dict(precision=1.0, recall=1.0, f1=1.0, hit=1.0)  # repeats once
    assert webqsp_prf1([], ['a']) == dict(precision=1.0, recall=0.0, f1=0.0, hit=0.0)
    assert webqsp_prf1([], []) == dict(precision=1.0, recall=1.0, f1=1.0, hit=1.0)
    assert webqsp_prf1(['a'], []) == dict(precision=0.0, recall=1.0, f1=0.0, hit=0.0)
    assert webqsp_prf1(['a', 'b', 'c'], ['c', 'd']) == dict(precision=1 / 3, recall=0.5, f1=0.4, hit=0.0)


def test_scoring_hand_made_records():
    names = FreebaseNames(freebase_store(rdflib_store()))
    gold = {question_key('what does jamaican people speak?'): BOTH_LANGS,
            question_key('what language is spoken in jamaica?'): ['Jamaican English'],
            question_key('who plays ken barlow?'): ['William Roache'],
            question_key('no answer here?'): []}
    jam = prog(JAM, LANGS, ('QueryName', [], [1]))
    ca = [dict(idx=0, question='what does jamaican people speak', samples=[dict(ok=True, program=jam)]),
          dict(idx=1, question='what language is spoken in jamaica', samples=[dict(ok=True, program=jam)]),
          dict(idx=2, question='who plays ken barlow', samples=[dict(ok=False)]),
          dict(idx=3, question='no answer here',
               samples=[dict(ok=True, program=prog(('Find', ['Nobody'], []), ('QueryName', [], [0])))])]
    rows = [score_webqsp_record(r, 'codealign', names, gold) for r in ca]
    assert [r['f1'] for r in rows] == [1.0, 2 / 3, 0.0, 1.0] and [r['hit'] for r in rows] == [1.0, 0.0, 0.0, 1.0]
    s = webqsp_scores(rows)
    assert (s['n'], s['f1'], s['hits_at_1']) == (4, 66.67, 50.0)
    assert (s['executed_percent'], s['answered_percent']) == (75.0, 50.0)
    assert s['unresolved_name_percent'] == 25.0 and s['precision'] == 87.5 and s['recall'] == 75.0
    # KB-Coder(6)-style records: the majority vote of the samples' answers is the prediction
    kb = dict(idx=0, question='what does jamaican people speak', samples=[
        dict(ok=True, sexpr='(JOIN location.country.languages_spoken "Jamaica")'),
        dict(ok=True, sexpr='(JOIN location.location.contains "Jamaica")'),
        dict(ok=True, sexpr='(JOIN location.country.languages_spoken "Jamaica")'), dict(ok=False)])
    r = score_webqsp_record(kb, 'kbcoder', names, gold)
    assert r['prediction'] == BOTH_LANGS and r['voted'] == 0 and r['executed'] == 3 and r['f1'] == 1.0
    with pytest.raises(KGQAError, match='no gold answers'):
        score_webqsp_record(dict(ca[0], question='something else'), 'codealign', names, gold)
    with pytest.raises(KGQAError, match='system must be'):
        score_webqsp_record(ca[0], 'sparql', names, gold)


def test_gold_answers_cover_every_test_question():
    path = data_dir('webqsp/test_answers_topic.json')  # no data: skipped outside CI (conftest)
    gold = webqsp_gold(path)
    lines = data_dir('webqsp/test_question_sparql.jsonl').read_text().splitlines()
    questions = [json.loads(l)['question'] for l in lines if l.strip()]
    assert len(gold) == len(questions) == 1639
    assert sum(question_key(q) in gold for q in questions) == 1638  # the two files space "'s" differently
    assert gold_for(gold, 'what movies did ron howard direct')  # ... and one ends in 'director' there
    assert all(gold_for(gold, q) is not None for q in questions)
    assert all(None not in a for a in gold.values())


# ---- run_webqsp end to end: papermill, model='fake', scored on Virtuoso from the stored records ----

QUESTIONS = [  # the fake model writes the Jamaica program unless len("'question'") % 3 == 0: then prose
    ('what do jamaican people speak', BOTH_LANGS),  # F1 1, Hits@1 1
    ('what languages are spoken in jamaica', ['Jamaican English']),  # F1 2/3, Hits@1 0 (the sorted first is Creole)
    ('what does jamaican people speak', BOTH_LANGS),  # prose: nothing to execute, F1 0
]


def webqsp_data(root: Path) -> Path:
    d = root/'webqsp'; d.mkdir(parents=True)
    assert [(len(q) + 2) % 3 != 0 for q, _ in QUESTIONS] == [True, True, False]
    sparql = 'PREFIX ns: <http://rdf.freebase.com/ns/>\nSELECT DISTINCT ?x WHERE { ns:m.03_r3 ns:a.b ?x . }'
    lines = ''.join(json.dumps(dict(question=q, sparql_query=sparql)) + '\n' for q, _ in QUESTIONS)
    (d/'test_question_sparql.jsonl').write_text(lines); (d/'train_question_sparql.jsonl').write_text(lines)
    (d/'test_answers_topic.json').write_text(json.dumps([dict(QuestionId=f'WebQTest-{k}', RawQuestion=q + '?', answer=a,
                                                             topic_entity={}) for k, (q, a) in enumerate(QUESTIONS)]))
    return root


def test_run_webqsp_scores_on_virtuoso(tmp_path, graph_nt, monkeypatch):
    papermill = pytest.importorskip('papermill')
    need_engine('virtuoso')
    monkeypatch.delenv('KGQA_FREEBASE_ENDPOINT', raising=False)
    data, out = webqsp_data(tmp_path/'data'), tmp_path/'run_webqsp'
    def run(name, **params):
        papermill.execute_notebook(str(NBS/'run_webqsp.ipynb'), str(tmp_path/f'{name}.ipynb'), cwd=str(NBS),
                                   parameters=dict(model='fake', n_questions=3, n_relations=0, data_dir=str(data),
                                                   out_dir=str(out), **params),
                                   kernel_name='python3', progress_bar=False)
        return json.loads((out/params['system']/'metrics.json').read_text())
    m = run('plain', system='codealign')  # no endpoint: generation only, and one line says why
    assert 'answers cannot be scored' in m['statement'] and 'f1' not in m['summary']
    assert m['freebase']['endpoint'] is None and 'KGQA_FREEBASE_ENDPOINT is not set' in m['freebase']['note']
    records = (out/'codealign'/'records.jsonl').read_text()
    with ENGINES['virtuoso'][0](graph_nt) as server:
        for system in ('codealign', 'kbcoder'):
            m = run(system, system=system, freebase_endpoint=server.url)
            s = m['summary']
            assert (s['n'], s['f1'], s['hits_at_1'], s['executed_percent']) == (3, 55.56, 33.33, 66.67), (system, s)
            assert m['freebase']['endpoint'] == server.url and m['freebase']['scores']['f1'] == 55.56
            assert 'scored with WebQSP F1 and Hits@1' in m['statement'] and s['fer_percent'] == 33.33
            rows = [json.loads(l) for l in (out/system/'scores.jsonl').read_text().splitlines()]
            assert [r['prediction'] for r in rows] == [BOTH_LANGS, BOTH_LANGS, []]
    assert (out/'codealign'/'records.jsonl').read_text() == records  # scored from the stored records, none made again
