"""Hostile text in every atom of an S-expression (and in `exclude` and `ns`) either raises a kgqa_nb error or stays
inside one escaped SPARQL literal: the query rdflib parses has exactly the shape of a harmless one."""
import re

import pytest
from hypothesis import example, given, settings, strategies as st

rdflib = pytest.importorskip('rdflib')
from rdflib.plugins.sparql import prepareQuery
from rdflib.plugins.sparql.parserutils import CompValue

from kgqa_nb.core import KGQAError
from kgqa_nb.programs.sexpr_sparql import (FREEBASE_NS, RdflibStore, SparqlError, is_freebase_class, is_freebase_id,
                            sexpr_answers_sparql, sexpr_to_sparql)

INJECTION = 'a.b ?y . } UNION { ?x ?p ?o'
ATTACKS = [INJECTION, 'x" } UNION { ?s ?p ?o } #', 'x\\" . } #', 'x\\\\" ) } #', 'm.01 } UNION { ?x ?p ?o',
           'r.s> ?y . ?x <p', 'a.b ; ns:p ?o', '\\u0022) } UNION { ?s ?p ?o } #', 'x\\U00000022 }', 'a\nb',
           'a\rb', '"""', "'''", 'a # comment', 'http://x/> . } SELECT * { <', '1990 } UNION { ?s ?p ?o', '1.5e3 ]',
           '-12', '+1.5', '\ud800', '\x00', 'é.person', 'people.person.', '.people', 'a..b', 'm.0abc\n']
SPARQL_CHARS = list('ab.09_?{}"\'\\<>#\n\r\t u;,()|^`:*-+eEU')
HOSTILE = st.one_of(st.text(), st.text(alphabet=st.sampled_from(SPARQL_CHARS)), st.sampled_from(ATTACKS))

NAME = re.compile(r'[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*')  # what may follow ns: (the module's own rule, restated)
LEAF = ['m.0p', 'a.b', 'plain text']  # the three forms a leaf takes: an id, a class, a literal
NUMBERS = ['1990-01-01', '1990', '-1990', '1.5', '+1.5', '-1.5', '.5', '1e3']

# slot -> (sexpr_to_sparql arguments with the text in that slot, harmless values giving every legal shape, is a name)
SLOTS = {
    'leaf': (lambda t: ((t,), {}), LEAF, False),
    'join leaf': (lambda t: ((('JOIN', 'r.s', t),), {}), LEAF, False),
    'reverse join leaf': (lambda t: ((('JOIN', ('R', 'r.s'), t),), {}), LEAF, False),
    'and leaf': (lambda t: ((('AND', 'a.b', t),), {}), LEAF, False),
    'count leaf': (lambda t: ((('COUNT', ('AND', t, 'a.b')),), {}), LEAF, False),
    'argmax leaf': (lambda t: ((('ARGMAX', ('JOIN', 'r.s', t), 'r.n'),), {}), LEAF, False),
    'relation': (lambda t: ((('JOIN', t, 'm.01'),), {}), ['r.s'], True),
    'reverse relation': (lambda t: ((('JOIN', ('R', t), 'x'),), {}), ['r.s'], True),
    'comparison key': (lambda t: ((('<', t, '1990'),), {}), ['r.n'], True),
    'comparison value': (lambda t: ((('AND', 'a.b', ('>=', 'r.n', t)),), {}), NUMBERS, False),
    'argmin key': (lambda t: ((('ARGMIN', 'a.b', t),), {}), ['r.n'], True),
    'excluded id': (lambda t: ((('JOIN', 'r.s', 'm.01'),), {'exclude': ('m.02', t)}), ['m.03'], True),
    'namespace': (lambda t: ((('JOIN', 'r.s', 'm.01'),), {'ns': t}), [FREEBASE_NS], False),
}
FIXED_LITERALS = {'', 'en', '-'}  # the language filter's and the year comparison's own literals


def _shape(x):
    "The parsed query with every literal and IRI blanked: equal shapes mean the same clauses."
    if isinstance(x, rdflib.Literal): return 'LITERAL'
    if isinstance(x, rdflib.URIRef): return 'IRI'
    if isinstance(x, CompValue): return (x.name, tuple(sorted((k, _shape(v)) for k, v in x.items() if k != '_vars')))
    if isinstance(x, dict): return tuple(sorted((str(k), _shape(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)): return tuple(_shape(v) for v in x)
    return repr(x)

def _literals(x) -> set:
    if isinstance(x, rdflib.Literal): return {str(x)}
    if isinstance(x, dict): return set().union(*(_literals(v) for k, v in x.items() if k != '_vars'))
    if isinstance(x, (list, tuple)): return set().union(*(_literals(v) for v in x))
    return set()

def _algebra(slot: str, text: str):
    args, kw = SLOTS[slot][0](text)
    return prepareQuery(sexpr_to_sparql(*args, **kw)).algebra

SHAPES = {slot: {_shape(_algebra(slot, p)) for p in harmless} for slot, (_, harmless, _) in SLOTS.items()}


@pytest.mark.parametrize('slot', sorted(SLOTS))
def test_the_harmless_values_give_queries_rdflib_parses(slot):
    assert SHAPES[slot]


@settings(max_examples=600, deadline=None)
@given(slot=st.sampled_from(sorted(SLOTS)), text=HOSTILE)
@example(slot='relation', text=INJECTION)
@example(slot='leaf', text='x" } UNION { ?s ?p ?o } #')
@example(slot='leaf', text='\\u0022) } UNION { ?s ?p ?o } #')
@example(slot='namespace', text='http://x/> . } SELECT * { <')
def test_hostile_text_is_refused_or_stays_one_literal(slot, text):
    try: algebra = _algebra(slot, text)
    except KGQAError: return  # SparqlError, or SExprError / ConversionError for text the grammar already refuses
    assert _shape(algebra) in SHAPES[slot], (slot, text)  # no clause added, removed or changed
    if SLOTS[slot][2]: assert NAME.fullmatch(text), (slot, text)  # only plain names go after ns:
    if slot.endswith('leaf') or slot == 'leaf':  # the text itself is the one non-fixed literal, unchanged
        assert _literals(algebra) - FIXED_LITERALS <= {text}, (slot, text)


@pytest.mark.parametrize('slot', ['relation', 'reverse relation', 'comparison key', 'argmin key', 'excluded id'])
def test_the_injection_in_a_name_slot_names_the_token(slot):
    args, kw = SLOTS[slot][0](INJECTION)
    with pytest.raises(SparqlError, match=re.escape(repr(INJECTION))): sexpr_to_sparql(*args, **kw)


@settings(max_examples=150, deadline=None)
@given(text=HOSTILE)
@example(text='x" } UNION { ?s ?p ?o } #')
@example(text='back\\slash "quotes"\r\nand lines')
def test_a_literal_leaf_matches_exactly_its_text(text):
    "A one-triple graph whose name is `text`: the escaped literal finds that entity, and nothing else."
    g = rdflib.Graph()
    ns = rdflib.Namespace(FREEBASE_NS)
    g.add((ns['m.01'], ns['type.object.name'], rdflib.Literal(text)))
    g.add((ns['m.02'], ns['type.object.name'], rdflib.Literal(text + 'x')))
    if is_freebase_id(text) or is_freebase_class(text): return  # a name, not a literal
    try: answers = sexpr_answers_sparql(RdflibStore(g), ('JOIN', 'type.object.name', text))
    except KGQAError: return
    assert answers == ['m.01'], text
