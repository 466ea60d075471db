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
