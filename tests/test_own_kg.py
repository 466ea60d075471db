"""Every system on the shipped own-KG fixture through `nbs/experiments/run_kg.ipynb`: no benchmark data and no LLM needed (a
scripted model), so a fresh clone runs it; a second run resumes and recomputes nothing."""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / 'nbs' / 'experiments'


def test_run_kg_on_the_shipped_tsv_fixture(tmp_path):
    papermill = pytest.importorskip('papermill')
    params = {'kg_dir': str(ROOT / 'kgqa_nb' / 'data' / 'own_kg' / 'family_tsv'), 'name': 'family',
              'systems': 'nskgqa,nskgqa-names,codealign,symkgqa,kbcoder', 'model': 'fake', 'n_llm': 3,
              'out_dir': str(tmp_path / 'own_kg'), 'summary_file': str(tmp_path / 'own_kg.json')}
    files = lambda: {p.name: p.read_text() for p in sorted((tmp_path / 'own_kg' / 'family').glob('*.jsonl'))}
    for run in range(2):
        papermill.execute_notebook(str(NBS / 'run_kg.ipynb'), str(tmp_path / 'run.ipynb'), parameters=params,
                                   cwd=str(NBS), kernel_name='python3', progress_bar=False)
        if run == 0: first = files()
    assert files() == first  # resumed: no record recomputed or duplicated
    s = json.loads((tmp_path / 'own_kg.json').read_text())['kgs']['family']
    assert set(s['hits1']) == {'nskgqa', 'nskgqa-names', 'codealign', 'symkgqa', 'kbcoder'}
    assert {split for by in s['hits1'].values() for split in by} == {'2-hop/qa_dev', '3-hop/qa_dev'}
    assert s['hits1']['codealign']['2-hop/qa_dev']['n'] == 3
    assert all(r['coverage'] == 1.0 for r in s['induction'])  # every fixture question has an exact program
    assert set(s['seconds_to_first_answer']) == set(s['hits1'])
    assert s['hits1']['nskgqa']['2-hop/qa_dev']['value'] > 0  # no LLM: NS-KGQA answers some for real
    assert (tmp_path / 'own_kg' / 'family' / 'hits1.png').stat().st_size > 1000


def test_run_kg_zero_shot_without_a_pool(tmp_path):
    "pool none: nothing induced, NS-KGQA with relation names, CodeAlignKGQA with no demonstrations, SymKGQA skipped."
    papermill = pytest.importorskip('papermill')
    params = {'kg_dir': str(ROOT / 'kgqa_nb' / 'data' / 'own_kg' / 'family_tsv'), 'name': 'family-zero',
              'systems': 'nskgqa,codealign,symkgqa', 'pool': 'none', 'model': 'fake', 'n_llm': 2,
              'out_dir': str(tmp_path / 'own_kg'), 'summary_file': str(tmp_path / 'own_kg.json')}
    papermill.execute_notebook(str(NBS / 'run_kg.ipynb'), str(tmp_path / 'run.ipynb'), parameters=params,
                               cwd=str(NBS), kernel_name='python3', progress_bar=False)
    s = json.loads((tmp_path / 'own_kg.json').read_text())['kgs']['family-zero']
    assert set(s['hits1']) == {'nskgqa', 'codealign'} and s['induction'][0]['coverage'] is None
    first = json.loads((tmp_path / 'own_kg' / 'family-zero' / 'codealign_2-hop_qa_dev.jsonl').read_text().splitlines()[0])
    assert first['attempts'][0]['demos'] == [] and 'schema' in first
