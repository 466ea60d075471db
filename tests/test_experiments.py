"Papermill smoke runs of the experiment notebooks (run_kqapro, run_metaqa, report) on the scripted FakeBackend, and the no-server fast fail."
import json, os, subprocess, sys
from pathlib import Path
import pytest

papermill = pytest.importorskip('papermill')
ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / 'nbs'

def run_nb(name, out_nb, **params):
    return papermill.execute_notebook(str(NBS / name), str(out_nb), parameters=params, cwd=str(NBS),
                                      kernel_name='python3', progress_bar=False)

def test_run_kqapro_smoke_and_resume(tmp_path):
    out = tmp_path / 'run_kqapro'
    run_nb('run_kqapro.ipynb', tmp_path / 'a.ipynb', model='fake', n_questions=3, out_dir=str(out), data_dir=str(tmp_path))
    m = json.loads((out / 'metrics.json').read_text())
    assert m['model'] == 'fake' and m['questions_done'] == 3 and m['linking'] == 'realistic'
    assert m['note'].startswith('No KQA Pro KB/val files under') and 'demo benchmark' in m['data']
    assert m['summary']['all']['n'] == 3 and 0 <= m['summary']['all']['hits_at_1'] <= 100
    for f in ('records.jsonl', 'results.md', 'results.csv', 'by_category.png', 'latency.png', 'failures.md'):
        assert (out / f).stat().st_size > 0, f
    lines = (out / 'records.jsonl').read_text().splitlines()
    # a rerun answers nothing again and reproduces the metrics
    run_nb('run_kqapro.ipynb', tmp_path / 'b.ipynb', model='fake', n_questions=3, out_dir=str(out), data_dir=str(tmp_path))
    assert (out / 'records.jsonl').read_text().splitlines() == lines
    m2 = json.loads((out / 'metrics.json').read_text())
    assert {g: f['hits_at_1'] for g, f in m2['summary'].items()} == {g: f['hits_at_1'] for g, f in m['summary'].items()}

def test_run_metaqa_smoke(tmp_path):
    out = tmp_path / 'run_metaqa'
    # no grounding: the MetaQA KGIndex (15 min to build) is not needed
    run_nb('run_metaqa.ipynb', tmp_path / 'm.ipynb', model='fake', config='no_grounding', n_per_hop=1, pool_size=30, out_dir=str(out))
    m = json.loads((out / 'metrics.json').read_text())
    assert m['questions_done'] == 3 and m['pipeline_config']['grounding'] is False
    assert set(m['summary']) == {'metaqa-1hop', 'metaqa-2hop', 'metaqa-3hop', 'all'}
    assert (out / 'by_hop.png').exists() and (out / 'results.md').exists()

def test_report_writes_page(tmp_path):
    page = tmp_path / 'README.md'
    run_nb('report.ipynb', tmp_path / 'r.ipynb', outputs_dir=str(ROOT / 'outputs'), out_path=str(page))
    text = page.read_text()
    assert text.startswith('# Results') and '## KQA Pro: the main job (run_kqapro)' in text
    from kgqa_nb.experiments import REPORT_SECTIONS
    for rel, *_ in REPORT_SECTIONS:  # every output has a section: its table or 'not run yet'
        assert f'Source: `{rel}`' in text

def test_run_kqapro_fails_fast_without_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.endswith('_BASE_URL')}
    r = subprocess.run([sys.executable, '-m', 'papermill', 'run_kqapro.ipynb', str(tmp_path / 'x.ipynb'), '-p', 'model', 'codellama',
                        '-p', 'out_dir', str(tmp_path / 'o'), '--no-progress-bar'], cwd=NBS, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert 'LLMUnavailableError' in r.stderr + r.stdout and 'KGQA_LLM_BASE_URL' in r.stderr + r.stdout
    assert not (tmp_path / 'o' / 'records.jsonl').exists()
