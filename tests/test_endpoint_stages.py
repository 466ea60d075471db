"""Pipeline stages on a KG that exists only behind a SPARQL endpoint (kgqa_nb.kg.remote): the mini MetaQA KB and the
demo KB (KQA Pro schema), in embedded Oxigraph and in the Oxigraph server and Virtuoso started by the tests, give the
local KG's vocabulary, facts, grounding and demonstration feasibility, and a whole pipeline run with a scripted LLM
and no local KB file gives the local run's answers and Hits@1. The vocabulary is read once and cached on disk.

Without an engine's program its tests skip with one reason; under CI (`CI=true`) they fail instead."""
import shutil
from contextlib import ExitStack
from dataclasses import asdict
from functools import lru_cache
import numpy as np
import pytest

pytest.importorskip('pyoxigraph')
from test_endpoints import ENGINES, need_engine
from kgqa_nb.kg import rdf
from kgqa_nb.datasets.benchgen import demo_benchmark, load_kqapro_split
from kgqa_nb.core import package_data
from kgqa_nb.kg.store import load_kb
from kgqa_nb.kopl.sparql import BackendError, OxigraphStore, kg_executor
from kgqa_nb.datasets.metaqa import load_metaqa_split, mini_metaqa_dir
from kgqa_nb.kg.remote import EndpointKG, RemoteKGError, cached_vocabulary, stages_kg
from kgqa_nb.programs.sexpr_sparql import SparqlStore

KBS = {'mini-metaqa': lambda: load_kb(mini_metaqa_dir()/'kb.txt'),
       'demo': lambda: load_kb(package_data('demo_kb.json'))}


@lru_cache(maxsize=None)
def kg_of(name: str): return KBS[name]()


@pytest.fixture(scope='module')
def nt_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('nt')
    return {name: rdf.write_ntriples(kg_of(name), folder/f'{name}.nt') for name in KBS}


def running(kind: str, nt_files):
    "{kb name: (store, endpoint URL or None)} on one engine ('embedded': in process, no URL)."
    if kind == 'embedded':
        yield {name: (OxigraphStore(rdf.oxigraph_store(kg_of(name))), None) for name in KBS}
        return
    need_engine(kind)
    with ExitStack() as stack:
        servers = {name: stack.enter_context(ENGINES[kind][0](nt)) for name, nt in nt_files.items()}
        yield {name: (s.store(), s.url) for name, s in servers.items()}

@pytest.fixture(scope='module', params=['embedded', *ENGINES])
def engine(request, nt_files): yield from running(request.param, nt_files)

@pytest.fixture(scope='module', params=list(ENGINES))
def server(request, nt_files):  # endpoint-only pipelines need a URL: the servers, not embedded Oxigraph
    yield from running(request.param, nt_files)


@pytest.fixture(scope='module')
def remotes(engine, tmp_path_factory):
    folder = tmp_path_factory.mktemp('vocab')
    return {name: EndpointKG(store, folder=folder) for name, (store, _) in engine.items()}


@pytest.fixture(scope='module')
def embedder():
    from kgqa_nb.kg.embed import Embedder
    return Embedder()


def sample(names: list, k: int = 40) -> list: return names[::max(1, len(names) // k)]


def walk(kg, nodes, **kw):
    rels, attrs = kg.neighbourhood(nodes, **kw)
    return [(r, d, objs.tolist(), q) for r, d, objs, q in rels], attrs


# ------------------------------------------------------------------------------------------------ read once
@pytest.mark.parametrize('name', list(KBS))
def test_vocabulary_equals_the_local_one(engine, remotes, name):
    from kgqa_nb.programs.grammar import kg_vocabulary
    kg, remote = kg_of(name), remotes[name]
    assert cached_vocabulary(engine[name][0], cache=False, page=37) == remote.vocab  # many pages read as one
    assert remote.vocab.ranked and remote.elements() == kg.elements()
    assert remote.key_type == kg.key_type and set(remote.unit_names()) == set(kg.unit_names())
    assert remote.ids == kg.ids and remote.names == kg.names and (remote.is_concept == kg.is_concept).all()
    for k in kg.elements()['attributes']: assert remote.key_units(k) == kg.key_units(k), k
    for k in kg.elements()['qualifiers']: assert remote.key_units(k, True) == kg.key_units(k, True), k
    a, b = kg_vocabulary(kg, cache=False), kg_vocabulary(remote, cache=False)
    assert (a.names, a.units, a.entities_constrained) == (b.names, b.units, b.entities_constrained)
    stats = kg.stats()
    assert {k: v for k, v in remote.stats().items() if k != 'triples'} == {k: stats[k] for k in remote.stats()
                                                                          if k != 'triples'}
    assert remote.vocab.triples == sum(rdf.expected_triples(kg).values())


# ------------------------------------------------------------------------------------------------ per question
@pytest.mark.parametrize('name', list(KBS))
def test_walks_equal_the_local_ones(remotes, name):
    kg, remote = kg_of(name), remotes[name]
    el = kg.elements()
    for n in sample(el['entities']) + sample(el['concepts'], 10):
        for concept in (False, True):
            assert np.array_equal(kg.start_nodes(n, concept), remote.start_nodes(n, concept)), (n, concept)
        nodes = kg.start_nodes(n, n in el['concepts'])
        assert walk(kg, nodes) == walk(remote, nodes), n
        assert kg.item_schema(n) == remote.item_schema(n), n
    some = dict(relations=set(el['relations'][::2]), keys=set((el['attributes'] + el['qualifiers'])[::2]))
    nodes = np.arange(0, kg.n_items, 3)  # more than one VALUES block
    assert walk(kg, nodes, **some) == walk(remote, nodes, **some)
    for k in el['attributes']: assert sorted(kg.key_strings(k)) == sorted(remote.key_strings(k)), k
    for k in el['qualifiers']: assert sorted(kg.key_strings(k, True)) == sorted(remote.key_strings(k, True)), k


def fact_questions(name: str) -> list[tuple[str, list, list]]:
    "(question, E', C') of a sample of questions with gold programs."
    from kgqa_nb.stages.facts import oracle_mentions
    if name == 'mini-metaqa':
        dev = [q for h in (1, 2, 3) for q in load_metaqa_split(h, 'dev', mini_metaqa_dir())[:8]]
        return [(q.question, [q.topic], []) for q in dev]
    qs = load_kqapro_split(demo_benchmark(5, seed=0), 'train')[::3][:30]
    return [(q['question'], *oracle_mentions(q['program'])) for q in qs]


@pytest.mark.parametrize('name', list(KBS))
def test_facts_equal_the_local_ones(remotes, embedder, name):
    from kgqa_nb.stages.facts import FactsExtractor
    local, remote = (FactsExtractor(kg, embedder, theta=0.35, hops=2) for kg in (kg_of(name), remotes[name]))
    qs = fact_questions(name)
    found = 0
    for question, ents, cons in qs:
        a, b = local.extract(question, ents, cons), remote.extract(question, ents, cons)
        assert (a.facts, a.not_in_kg) == (b.facts, b.not_in_kg), question
        found += bool(a.facts)
    assert found >= 0.6 * len(qs), f'facts for {found} of {len(qs)} questions: a weak check'


def slipped(program: list, kg) -> list:
    "The program with each name input lowercased (the grounder must find it again)."
    names = set(kg.elements()['relations']) | set(kg.elements()['attributes']) | set(kg.name_index)
    return [{**s, 'inputs': [t.lower() if t in names else t for t in s['inputs']]} for s in program]


@pytest.mark.parametrize('name', list(KBS))
def test_grounding_equals_the_local_one(remotes, name):
    from kgqa_nb.stages.grounding import FuzzyIndex, Grounder
    kg, remote = kg_of(name), remotes[name]
    if name == 'mini-metaqa':
        programs = [q.program for h in (1, 2, 3) for q in load_metaqa_split(h, 'dev', mini_metaqa_dir())[:6]]
    else: programs = [q['program'] for q in load_kqapro_split(demo_benchmark(5, seed=0), 'train')[:40]]
    local = Grounder(kg, FuzzyIndex(kg), None, use_cache=False)
    there = Grounder(remote, FuzzyIndex(remote), None, use_cache=False)
    assert there.fingerprint == local.fingerprint  # the same KGIndex and decision cache serve both
    strip = lambda ds: [{k: v for k, v in asdict(d).items() if k != 'seconds'} for d in ds]
    changed = 0
    for p in programs:
        for prog in (p, slipped(p, kg)):
            (a, da), (b, db) = local.ground(prog, 'q'), there.ground(prog, 'q')
            assert a == b and strip(da) == strip(db), prog
            changed += prog is not p and prog != p
    assert changed >= len(programs) // 2


@pytest.mark.parametrize('name', list(KBS))
def test_demonstration_feasibility_equals_the_local_one(remotes, name):
    from kgqa_nb.stages.demos import entity_profile
    kg, remote = kg_of(name), remotes[name]
    for n in sample(kg.elements()['entities'], 25): assert entity_profile(kg, n) == entity_profile(remote, n), n


# ------------------------------------------------------------------------------------------------ whole pipelines
def endpoint_only_copy(src, dst, kb_file: str):
    shutil.copytree(src, dst)
    (dst/kb_file).unlink()
    return dst


@pytest.mark.parametrize('config', ['codealign', 'codealign_kg', 'symkgqa'])
def test_metaqa_pipeline_on_an_endpoint_only_kg(server, tmp_path, config):
    "No kb.txt in the folder: linking, facts, retrieval, grounding, grammar and execution all go to the endpoint."
    from test_mini_metaqa import scripted_gold
    from kgqa_nb.systems.experiments import experiment_config
    from kgqa_nb.llm.base import FakeBackend
    from kgqa_nb.datasets.metaqa_stages import metaqa_questions, metaqa_stages
    from kgqa_nb.systems.pipeline import run_pipeline, summarize
    url = server['mini-metaqa'][1]
    root, bare = mini_metaqa_dir(), endpoint_only_copy(mini_metaqa_dir(), tmp_path/'metaqa', 'kb.txt')
    qs = metaqa_questions(n_per_hop=6, root=root)
    cfg = experiment_config(config)
    recs = {}
    for where, folder, kw in (('local', root, {}), ('endpoint', bare, dict(kg_backend=url, kg_source='endpoint'))):
        st = metaqa_stages(FakeBackend(scripted_gold(qs, cfg.system)), exclude=[q.question for q in qs], root=folder,
                           pool_size=60, **kw)
        recs[where] = run_pipeline(qs, cfg, st, tmp_path/f'{where}.jsonl', progress=False)
    assert isinstance(st.facts.kg, EndpointKG) and st.executor.kg is st.facts.kg and not (bare/'kb.txt').exists()
    assert [sorted(r['prediction']) for r in recs['endpoint']] == [sorted(r['prediction']) for r in recs['local']]
    assert [r['facts'] for r in recs['endpoint']] == [r['facts'] for r in recs['local']]
    assert [r['decisions'] and [d['choice'] for d in r['decisions']] for r in recs['endpoint']] == \
        [r['decisions'] and [d['choice'] for d in r['decisions']] for r in recs['local']]
    hits = {w: summarize(rs)['all']['hits_at_1'] for w, rs in recs.items()}
    assert hits['endpoint'] == hits['local'] == 100.0, hits


def test_kqapro_pipeline_on_an_endpoint_only_kg(server, tmp_path):
    "The demo benchmark without kb.json: spaCy linking against the endpoint's names, facts, grounding, execution."
    from kgqa_nb.datasets.kqapro import kqapro_questions, kqapro_rescore, kqapro_stages
    from kgqa_nb.systems.experiments import experiment_config
    from kgqa_nb.llm.base import FakeBackend
    from kgqa_nb.systems.pipeline import run_pipeline
    from kgqa_nb.programs.prompts import CODEALIGN_ANSWER_START, codealign_steps
    url = server['demo'][1]
    folder = demo_benchmark(5, seed=0)
    bare = endpoint_only_copy(folder, tmp_path/'demo', 'kb.json')
    qs = kqapro_questions(folder, 'val', n=12)
    by_text = {q.question: q.program for q in qs}
    answer = lambda prompt: codealign_steps(by_text[max(by_text, key=prompt.rfind)])[len(CODEALIGN_ANSWER_START):]
    cfg = experiment_config('codealign')
    recs = {}
    for where, f, kw in (('local', folder, {}), ('endpoint', bare, dict(kg_backend=url, kg_source='endpoint'))):
        st = kqapro_stages(f, FakeBackend(answer), pool_size=30, **kw)
        recs[where] = [kqapro_rescore(r) for r in run_pipeline(qs, cfg, st, tmp_path/f'{where}.jsonl', progress=False)]
    assert isinstance(st.grounder.kg, EndpointKG) and not (bare/'kb.json').exists()
    for a, b in zip(recs['local'], recs['endpoint']):
        assert (a['linked'], a['facts'], a['executed']) == (b['linked'], b['facts'], b['executed']), a['question']
        assert sorted(a['prediction']) == sorted(b['prediction']) and a['hit'] == b['hit'], a['question']
    assert sum(r['hit'] for r in recs['endpoint']) >= 0.8 * len(qs)


# ------------------------------------------------------------------------------------------------ the cache
class CountingStore(SparqlStore):
    "A store that counts the queries sent through it."
    def __init__(self, inner): self.inner, self.sent = inner, []
    def solutions(self, query: str): self.sent.append(query); return self.inner.solutions(query)
    def select(self, query: str): self.sent.append(query); return self.inner.select(query)


def test_the_vocabulary_is_cached_and_invalidated_when_the_kb_changes(nt_files, tmp_path):
    import pyoxigraph as ox
    raw = ox.Store()
    raw.bulk_load(path=str(nt_files['mini-metaqa']), format=ox.RdfFormat.N_TRIPLES)
    store = CountingStore(OxigraphStore(raw))
    first = cached_vocabulary(store, folder=tmp_path)
    n_bulk = len(store.sent)
    assert n_bulk >= 5 and len(list(tmp_path.glob('*.json'))) == 1
    store.sent.clear()
    assert cached_vocabulary(store, folder=tmp_path) == first
    assert len(store.sent) == 2 and not any('p:name' in q or 'LIMIT' in q for q in store.sent)  # the fingerprint only
    store.sent.clear()
    assert cached_vocabulary(store, folder=tmp_path, refresh=True) == first and len(store.sent) >= n_bulk
    new = ox.NamedNode(rdf.item_iri('A New Film'))
    raw.add(ox.Quad(new, ox.NamedNode(rdf.Pred.name), ox.Literal('A New Film')))
    rank = ox.Literal('99999', datatype=ox.NamedNode(rdf.XSD_NS + 'integer'))
    raw.add(ox.Quad(new, ox.NamedNode(rdf.Pred.rank), rank))
    store.sent.clear()
    changed = cached_vocabulary(store, folder=tmp_path)
    assert len(store.sent) >= n_bulk and changed.fingerprint != first.fingerprint and changed.names[-1] == 'A New Film'
    assert len(list(tmp_path.glob('*.json'))) == 2
    # far smaller than the KG: no facts, only names, ids and the schema
    assert first.nbytes() < nt_files['mini-metaqa'].stat().st_size / 50


# ------------------------------------------------------------------------------------------------ errors
def test_what_cannot_run_on_an_endpoint_says_so(nt_files, tmp_path):
    remote = EndpointKG(rdf.oxigraph_store(kg_of('mini-metaqa')), folder=tmp_path)
    with pytest.raises(BackendError, match='memory'): kg_executor(remote, 'memory')
    with pytest.raises(RemoteKGError, match='kg_backend must be its URL'):
        stages_kg(tmp_path/'kb.txt', 'memory', 'endpoint')
    with pytest.raises(RemoteKGError, match='kg_source must be one of'):
        stages_kg(tmp_path/'kb.txt', 'memory', 'remote')
    assert stages_kg(mini_metaqa_dir()/'kb.txt', 'http://127.0.0.1:9/sparql').stats() == kg_of('mini-metaqa').stats()
    from kgqa_nb.systems.resolver import KBView
    with pytest.raises(RemoteKGError, match=r'kgqa_nb(\.\w+)+ reads KG\.\w+, a column of the in-memory KG'):
        KBView(remote)
