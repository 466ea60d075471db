"""Runs every notebook in nbs/ and nbs/experiments/ the way `nbdev_test` does (nbdev's own `test_nb`, the same skip flags
from settings.ini), one pytest test each, so CI ends in a pytest summary. The experiment notebooks (papermill) open
with a `skip_exec` frontmatter, so nbdev runs none of their cells; `nbdev_test` itself does not look into
nbs/experiments/ (settings.ini recursive = False).

Cells that read benchmark data carry the `#| data` flag (settings.ini `tst_flags`). With the data present they run,
as `nbdev_test --flags data` runs them; without it (a fresh clone) they are skipped and the rest of the notebook still
runs; under CI missing data is a failure."""
from pathlib import Path
import pytest
from nbdev.config import get_config
from nbdev.test import test_nb as run_notebook  # renamed so pytest does not collect it
from conftest import IN_CI, DATA_SKIP_REASON

NBS_DIR = Path(__file__).parents[1]/'nbs'
NBS = sorted((p for p in [*NBS_DIR.glob('*.ipynb'), *(NBS_DIR/'experiments').glob('*.ipynb')]
              if not p.name.startswith(('_', '.'))), key=lambda p: p.name)
DATA_FLAG = 'data'
DATA_FILES = ('metaqa/kb.txt', 'kopl/example_kb.json', 'kqapro/test.json')  # what the `#| data` cells read


def have_benchmark_data() -> bool:
    from kgqa_nb.core import data_dir
    try: return all(data_dir(f).exists() for f in DATA_FILES)
    except FileNotFoundError: return False


def uses_data_flag(nb: Path) -> bool: return f'#| {DATA_FLAG}' in nb.read_text(encoding='utf-8')


@pytest.mark.parametrize('nb', NBS, ids=[p.name for p in NBS])
def test_notebook(nb, record_property):
    cfg = get_config()
    flags, data = cfg.tst_flags.split(), have_benchmark_data()
    if not data and IN_CI: pytest.fail(f'{DATA_SKIP_REASON} (CI=true needs it: {", ".join(DATA_FILES)})')
    ok, _ = run_notebook(nb, skip_flags=flags, force_flags=[DATA_FLAG] if data else [], basepath=cfg.config_path)
    assert ok, f'{nb.name} failed: its traceback is printed above'
    if not data and uses_data_flag(nb): record_property('data_cells_skipped', True)


EXPERIMENTS = [p for p in NBS if '"parameters"' in p.read_text(encoding='utf-8')]

@pytest.mark.parametrize('nb', EXPERIMENTS, ids=[p.name for p in EXPERIMENTS])
def test_experiment_notebook_is_left_to_papermill(nb):
    "A papermill notebook (it has a `parameters` cell) must open with a *raw* `skip_exec` frontmatter cell: nbdev reads no other, and would run the whole experiment."
    import json
    first = json.loads(nb.read_text(encoding='utf-8'))['cells'][0]
    assert first['cell_type'] == 'raw' and 'skip_exec: true' in ''.join(first['source']), nb.name


def test_experiment_notebooks_are_in_their_folder():
    "Papermill notebooks live in nbs/experiments/ (their paths, `../../outputs`, assume it), not beside the components."
    assert EXPERIMENTS and all(p.parent.name == 'experiments' for p in EXPERIMENTS), [p.name for p in EXPERIMENTS]


def test_data_flag_is_a_test_flag():
    "`#| data` cells are skipped by plain `nbdev_test` only because settings.ini lists the flag."
    assert DATA_FLAG in get_config().tst_flags.split()
