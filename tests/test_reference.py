"""The wrappers around the official KoPL engines (kgqa_nb.kopl.reference): the paths the notebook's examples do not take."""
from __future__ import annotations
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip('kopl')
from kgqa_nb.core import package_data
from kgqa_nb.kopl.reference import (KoPLEngineReference, KoPLReference, ReferenceUnavailable, RefFailure, canonical,
                               kopl_dependencies, same_answer)

sys.path.insert(0, str(Path(__file__).parent))
from test_differential import HANDWRITTEN, KB  # noqa: E402  (the hand-written programs over the fixture)

COUNT_ALL = [{'function': 'FindAll', 'inputs': []}, {'function': 'Count', 'inputs': []}]


def test_explicit_dependencies_run_like_forward():
    "`KoPLReference` follows given dependencies with kopl's own functions; with kopl's inferred ones it must give `forward`'s answers."
    ref = KoPLReference(KB)
    for program in HANDWRITTEN:
        bare = [{k: v for k, v in s.items() if k != 'dependencies'} for s in program]
        try: deps = kopl_dependencies([s['function'] for s in bare])
        except IndexError: continue
        explicit = [dict(s, dependencies=d) for s, d in zip(bare, deps)]
        a, b = ref.answer(bare), ref.answer(explicit)
        assert same_answer(a, b), (bare, a, b)


def test_kopl_dependencies_agree_with_ours():
    "The reference's copy of kopl's inference agrees with kgqa_nb.kopl.functions.infer_dependencies on valid programs."
    from kgqa_nb.kopl.functions import ProgramError, infer_dependencies
    checked = 0
    for program in HANDWRITTEN:
        names = [s['function'] for s in program]
        try: ours = infer_dependencies(names)
        except ProgramError: continue
        assert kopl_dependencies(names) == ours, names
        checked += 1
    assert checked > 150


def test_missing_kopl_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, 'kopl.kopl', None)  # makes `from kopl.kopl import ...` fail
    with pytest.raises(ReferenceUnavailable, match=r'pip install kopl==0\.0\.5'):
        KoPLReference(KB)


def test_missing_kopl_engine_names_the_pip_command(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a: None if name == 'kopl_engine' else real(name, *a))
    with pytest.raises(ReferenceUnavailable, match=r'pip install kopl-engine==0\.1\.1'):
        KoPLEngineReference(package_data('fixture_kb.json'))


def test_kopl_reference_leaves_the_kb_alone():
    kb = json.loads(package_data('fixture_kb.json').read_text())
    before = json.dumps(kb, sort_keys=True)
    KoPLReference(kb).answer(COUNT_ALL)
    assert json.dumps(kb, sort_keys=True) == before


@pytest.fixture
def engine_available():
    pytest.importorskip('kopl_engine')


def test_engine_timeout_restarts_the_child(engine_available):
    with KoPLEngineReference(package_data('fixture_kb.json'), timeout=1e-6) as eng:
        first = eng.answer(COUNT_ALL)
        assert isinstance(first, RefFailure) and first.kind == 'timeout' and eng.restarts == 1
        eng.timeout = 20
        assert eng.answer(COUNT_ALL) == '54'


def test_engine_takes_a_dict_and_cleans_up(engine_available):
    eng = KoPLEngineReference(KB)
    tmp = Path(eng.kb_path)
    assert tmp.exists() and eng.answer(COUNT_ALL) == '54'
    eng.close()
    assert not tmp.exists() and eng.proc is None


def test_engine_missing_file(engine_available, tmp_path):
    with pytest.raises(FileNotFoundError, match='no such KB file'):
        KoPLEngineReference(tmp_path / 'nope.json')


def test_engine_survives_a_crash_between_answers(engine_available):
    crash = [{'function': 'Find', 'inputs': ['LeBron James']}, {'function': 'QueryAttr', 'inputs': ['height']},
             {'function': 'VerifyNum', 'inputs': ['tall', '>']}]
    with KoPLEngineReference(package_data('fixture_kb.json')) as eng:
        results = [eng.answer(p) for p in (COUNT_ALL, crash, COUNT_ALL, crash, COUNT_ALL)]
    assert [canonical(r) for r in results] == ['54', ('<failure>',), '54', ('<failure>',), '54']
    assert results[1].kind == 'crash' and eng.restarts == 2
