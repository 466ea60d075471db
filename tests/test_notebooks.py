"Runs every notebook in nbs/ the way `nbdev_test` does, one pytest test each, so CI ends in a pytest summary."
from pathlib import Path
import pytest
from nbdev.config import get_config
from nbdev.test import test_nb as run_notebook  # renamed so pytest does not collect it

NBS = sorted(p for p in (Path(__file__).parents[1]/'nbs').glob('*.ipynb') if not p.name.startswith(('_', '.')))

@pytest.mark.parametrize('nb', NBS, ids=[p.name for p in NBS])
def test_notebook(nb):
    cfg = get_config()
    ok, _ = run_notebook(nb, skip_flags=cfg.tst_flags.split(), basepath=cfg.config_path)
    assert ok, f'{nb.name} failed: its traceback is printed above'

EXPERIMENTS = [p for p in NBS if '"parameters"' in p.read_text(encoding='utf-8')]

@pytest.mark.parametrize('nb', EXPERIMENTS, ids=[p.name for p in EXPERIMENTS])
def test_experiment_notebook_is_left_to_papermill(nb):
    "A papermill notebook (it has a `parameters` cell) must open with a *raw* `skip_exec` frontmatter cell: nbdev reads no other, and would run the whole experiment."
    import json
    first = json.loads(nb.read_text(encoding='utf-8'))['cells'][0]
    assert first['cell_type'] == 'raw' and 'skip_exec: true' in ''.join(first['source']), nb.name
