"Runs nbs/experiments/generation_ser.ipynb with papermill on the scripted FakeBackend and a handful of questions, and checks its JSON report."
import json
from pathlib import Path
import pytest
from kgqa_nb.core import data_dir

papermill = pytest.importorskip('papermill')
NBS = Path(__file__).resolve().parents[1] / 'nbs' / 'experiments'

def test_generation_ser_smoke(tmp_path):
    data_dir('kqapro/test.json'); data_dir('metaqa/kb.txt')  # no data: skipped outside CI (conftest)
    out = tmp_path / 'generation_ser.json'
    papermill.execute_notebook(str(NBS / 'generation_ser.ipynb'), str(tmp_path / 'generation_ser.ipynb'),
                               parameters={'model': 'fake', 'n_kqapro': 4, 'n_metaqa': 2, 'max_new_calls': 7,
                                           'concurrency': 2,  # two questions in flight: records as they finish
                                           'results_path': str(tmp_path / 'r.jsonl'), 'out_path': str(out)},
                               cwd=str(NBS), kernel_name='python3', progress_bar=False)
    r = json.loads(out.read_text())
    assert r['model'] == 'fake' and r['questions_planned'] == 10 and r['questions_done'] == 7
    assert set(r['summary']) >= {'kqapro', 'metaqa-1hop', 'metaqa-all'}
    assert all(0 <= s['ser_percent'] <= 100 for s in r['summary'].values())
