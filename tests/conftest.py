import os
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault('KGQA_DATA', str(ROOT.parent/'shared'/'data'))
os.environ.setdefault('HF_HUB_OFFLINE', '1')
# caches written by tests (embeddings, indexes, LLM responses, generated benchmarks) stay in the git-ignored .cache/
os.environ.setdefault('KGQA_CACHE', str(ROOT/'.cache'/'kgqa_nb'))

# Benchmark data cannot ship with the project. A test that needs it raises `kgqa_nb.core.DataNotFoundError` (from
# `data_dir`); outside CI that test is reported as skipped with one reason, counted at the end. Under CI (`CI=true`) the data is there by contract, so the error stays a failure and a
# broken data path can never hide behind a skip.
IN_CI = os.environ.get('CI', '').lower() == 'true'
DATA_SKIP_REASON = 'benchmark data not found under $KGQA_DATA: see README, Data'

# Every dependency is installed in CI (`make install`): a test skipped there because a module does not import (the
# official KoPL engines, llama.cpp, PyKEEN, ...) would hide a broken install, so under CI it is a failure.
MISSING_MODULE = ('could not import', 'scripts/install_llm.sh')  # importorskip's message; our LLM tests' reason


def is_missing_module(longrepr) -> bool: return any(m in str(longrepr) for m in MISSING_MODULE)


def is_missing_data(exc: BaseException) -> bool:
    "True for the error `data_dir` raises when a benchmark file or the data folder is missing."
    from kgqa_nb.core import DataNotFoundError
    return isinstance(exc, DataNotFoundError)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if IN_CI and rep.skipped and is_missing_module(rep.longrepr): rep.outcome = 'failed'
    if IN_CI or call.excinfo is None or not rep.failed or not is_missing_data(call.excinfo.value): return
    rep.outcome = 'skipped'
    rep.longrepr = (str(item.path), item.location[1] or 0, f'{DATA_SKIP_REASON} ({call.excinfo.value})')


def pytest_collectreport(report):
    if IN_CI and report.skipped and is_missing_module(report.longrepr): report.outcome = 'failed'


def pytest_terminal_summary(terminalreporter):
    skipped = terminalreporter.stats.get('skipped', [])
    n_data = sum(1 for r in skipped if isinstance(r.longrepr, tuple) and DATA_SKIP_REASON in str(r.longrepr[2]))
    if n_data: terminalreporter.write_line(f'{n_data} test(s) skipped: {DATA_SKIP_REASON}')
    partial = [r for r in terminalreporter.stats.get('passed', []) if ('data_cells_skipped', True) in r.user_properties]
    if partial: terminalreporter.write_line(f'{len(partial)} notebook(s) passed without their `#| data` cells: '
                                            f'{DATA_SKIP_REASON}')
