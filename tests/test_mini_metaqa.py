"""The MetaQA code paths on the mini MetaQA folder the project writes itself (`kgqa_nb.datasets.metaqa.write_mini_metaqa`,
from the demo KB's films), so that a fresh clone without the benchmark data still exercises them: gold programs,
linking, the three program grammars at the KG level, NS-KGQA's resolver and subgraph builder, grounding with a
KGIndex, and both LLM pipelines end to end (a scripted LLM that writes each question's gold program)."""
import random
import pytest

from kgqa_nb.kopl.executor import KoPLExecutor
from kgqa_nb.kg.store import load_kb
from kgqa_nb.datasets.metaqa import load_metaqa_split, qtype_hops, execute_without_topic, write_mini_metaqa
from kgqa_nb.programs.prompts import CODEALIGN_ANSWER_START, codealign_steps, symkgqa_steps

HOPS = (1, 2, 3)


@pytest.fixture(scope='module')
def mini(tmp_path_factory):
    root = write_mini_metaqa(tmp_path_factory.mktemp('metaqa'))
    return root, load_kb(root/'kb.txt'), {h: load_metaqa_split(h, 'dev', root) for h in HOPS}


def test_the_folder_reads_like_metaqa(mini):
    root, kg, dev = mini
    assert [len(dev[h]) for h in HOPS] == [42, 36, 30]
    ex = KoPLExecutor(kg)
    for h in HOPS:
        for q in dev[h]:
            assert sorted(execute_without_topic(ex, q.program, q.topic)) == sorted(q.answers), q.question


def test_topics_are_linked_verbatim(mini):
    from kgqa_nb.stages.linking import link_metaqa
    _, kg, dev = mini
    for q in (q for h in HOPS for q in dev[h]):
        linked = link_metaqa(q.question, kg)
        assert linked.entities == [q.topic] and linked.mentions[0]['how'] == 'verbatim'


def test_gold_programs_are_in_every_kg_level_grammar(mini):
    from kgqa_nb.programs.grammar import codealign_grammar, kbcoder_grammar, kg_vocabulary, symkgqa_grammar
    from kgqa_nb.programs.prompts import kbcoder_calls, kopl_to_sexpr
    _, kg, dev = mini
    vocab = kg_vocabulary(kg, cache=False)
    ca, sk, kb = codealign_grammar(vocab), symkgqa_grammar(vocab), kbcoder_grammar(vocab)
    for q in (q for h in HOPS for q in dev[h]):
        assert ca.matches(codealign_steps(q.program)[len(CODEALIGN_ANSWER_START):])
        assert sk.matches(symkgqa_steps(q.program)) and kb.matches(kbcoder_calls(kopl_to_sexpr(q.program)))
    bad = codealign_steps(dev[1][0].program).replace('directed_by', 'produced_by')[len(CODEALIGN_ANSWER_START):]
    assert not ca.matches(bad)  # not a relation of the mini KB


def test_nskgqa_oracle_subgraphs_agree_with_the_executor(mini):
    from kgqa_nb.systems.qgraph import path_qgraph
    from kgqa_nb.systems.resolver import KBView, ResolverConfig, SymbolicResolver, metaqa_concepts
    _, kg, dev = mini
    ex = KoPLExecutor(kg)
    res = SymbolicResolver(KBView(kg, extra_concepts=metaqa_concepts(kg)), ResolverConfig(exclude_topic=True))
    for q in (q for h in HOPS for q in dev[h]):
        got = res.resolve(path_qgraph(q.question, q.topic, qtype_hops(q.qtype)))
        assert sorted(got.answers) == sorted(set(execute_without_topic(ex, q.program, q.topic))), q.question


def test_nskgqa_generated_subgraphs_find_the_gold_path(mini):
    from kgqa_nb.systems.qgraph import METAQA_RELATION_ALIASES, RelationMatcher, SubgraphBuilder
    from kgqa_nb.systems.resolver import KBView, ResolverConfig, SymbolicResolver, metaqa_concepts
    _, kg, dev = mini
    builder = SubgraphBuilder(RelationMatcher(kg, aliases=METAQA_RELATION_ALIASES, extra_concepts=['movie']),
                              relation_threshold=0.55)
    res = SymbolicResolver(KBView(kg, extra_concepts=metaqa_concepts(kg)), ResolverConfig(exclude_topic=True))
    qs = [q for h in HOPS for q in dev[h]]
    ok = [res.resolve(g).path == qtype_hops(q.qtype) for q, g in zip(qs, builder.build_many([q.question for q in qs]))]
    # 96 of 108 when written: the misses are two 3-hop types whose wording the builder reads as fewer hops
    assert sum(ok) / len(ok) >= 0.85, f'gold path in {sum(ok)} of {len(ok)} questions'


@pytest.fixture(scope='module')
def grounder(mini, tmp_path_factory):
    from kgqa_nb.kg.embed import KGIndex
    from kgqa_nb.stages.grounding import Grounder
    _, kg, _ = mini
    return Grounder(kg, KGIndex(kg, path=tmp_path_factory.mktemp('indexes'), progress=False), None, use_cache=False)


def test_gold_programs_need_no_grounding_and_slips_are_grounded(mini, grounder):
    from kgqa_nb.stages.grounding import needed_grounding
    _, kg, dev = mini
    words = {'directed_by': 'director', 'starred_actors': 'actor', 'release_year': 'release date',
             'in_language': 'language', 'has_genre': 'genre'}
    ex = KoPLExecutor(kg)
    for q in (q for h in HOPS for q in dev[h][:12]):
        out, dec = grounder.ground(q.program, q.question)
        assert out == q.program and not needed_grounding(dec)
        slips = [{**s, 'inputs': [words[s['inputs'][0]], s['inputs'][1]]} if s['function'] == 'Relate' else s
                 for s in q.program]
        out, dec = grounder.ground(slips, q.question)
        assert out == q.program, (q.question, [(d.mention, d.choice, d.how) for d in dec])
        assert sorted(ex.run(out)) == sorted(ex.run(q.program))


def scripted_gold(questions, system):
    "A stand-in LLM: for the question asked last in the prompt, its gold program in `system`'s format."
    by_text = {q.question: q.program for q in questions}
    def answer(prompt: str) -> str:
        text = max(by_text, key=prompt.rfind)
        if system == 'symkgqa': return symkgqa_steps(by_text[text])
        return codealign_steps(by_text[text])[len(CODEALIGN_ANSWER_START):]
    return answer


@pytest.mark.parametrize('name', ['codealign', 'codealign_kg', 'symkgqa', 'no_facts'])
def test_the_pipelines_run_end_to_end(mini, tmp_path, name):
    from kgqa_nb.systems.experiments import experiment_config
    from kgqa_nb.llm.base import FakeBackend
    from kgqa_nb.datasets.metaqa_stages import metaqa_questions, metaqa_stages
    from kgqa_nb.systems.pipeline import run_pipeline, summarize
    root, _, _ = mini
    qs = metaqa_questions(n_per_hop=8, root=root)
    cfg = experiment_config(name)
    st = metaqa_stages(FakeBackend(scripted_gold(qs, cfg.system)), exclude=[q.question for q in qs], root=root,
                       pool_size=60)
    recs = run_pipeline(qs, cfg, st, tmp_path/'records.jsonl', progress=False)
    s = summarize(recs)['all']
    assert s['n'] == 24 and s['hits_at_1'] == 100.0 and s['ser'] == 0, s
    if cfg.demos == 'dynamic':  # retrieved demonstrations come from the pool, never the evaluated questions
        shown = {d for r in recs for a in r['attempts'] for d in a['demos']}  # 'metaqa-<hop>hop-<line>'
        assert shown and not shown & {q.id.replace('-dev-', '-') for q in qs}


def test_the_pipeline_gives_the_same_records_on_oxigraph(mini, tmp_path):
    "kg_backend='oxigraph': programs run on the embedded SPARQL store, with the in-memory run's predictions."
    from kgqa_nb.systems.experiments import experiment_config
    from kgqa_nb.llm.base import FakeBackend
    from kgqa_nb.datasets.metaqa_stages import metaqa_questions, metaqa_stages
    from kgqa_nb.systems.pipeline import run_pipeline, summarize
    root, _, _ = mini
    qs = metaqa_questions(n_per_hop=8, root=root)
    cfg = experiment_config('codealign_kg')  # the KG-level grammar reads the executor's local KG
    recs = {}
    for kg_backend in ('memory', 'oxigraph'):
        st = metaqa_stages(FakeBackend(scripted_gold(qs, cfg.system)), exclude=[q.question for q in qs], root=root,
                           pool_size=60, kg_backend=kg_backend)
        recs[kg_backend] = run_pipeline(qs, cfg, st, tmp_path/f'{kg_backend}.jsonl', progress=False)
    assert type(st.executor).__name__ == 'SparqlExecutor'
    # the same answers; a set's order is not part of KoPL's semantics, and a SPARQL store returns its own order
    assert [sorted(r['prediction']) for r in recs['oxigraph']] == [sorted(r['prediction']) for r in recs['memory']]
    assert summarize(recs['oxigraph'])['all']['hits_at_1'] == summarize(recs['memory'])['all']['hits_at_1'] == 100.0
