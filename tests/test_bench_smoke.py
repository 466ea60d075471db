"Runs the executor benchmark notebook (nbs/experiments/bench_executor.ipynb) with papermill in quick mode and checks its JSON report."
import json
from pathlib import Path
import pytest

papermill = pytest.importorskip('papermill')
pytest.importorskip('kopl')
pytest.importorskip('kopl_engine')

NBS = Path(__file__).resolve().parents[1] / 'nbs' / 'experiments'
ENGINES = ('ours', 'kopl', 'kopl-engine')


@pytest.fixture(scope='module')
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('bench')
    out = tmp / 'bench_executor.json'
    papermill.execute_notebook(str(NBS / 'bench_executor.ipynb'), str(tmp / 'bench_executor.ipynb'),
                               parameters={'quick': True, 'n_programs': 120, 'repeats': 1, 'out_path': str(out)},
                               cwd=str(NBS), kernel_name='python3', progress_bar=False)
    return json.loads(out.read_text()), out


def test_parameters_reach_the_notebook(report):
    r, _ = report
    # fails when the `parameters` cell tag was stripped: papermill then injects above the defaults
    assert r['parameters']['quick'] is True and r['parameters']['n_programs'] == 120 and r['parameters']['repeats'] == 1


def test_figures_per_engine(report):
    r, _ = report
    for engine in ENGINES:
        figs = r['results'][engine]
        assert figs['load_s'] > 0 and figs['programs_per_s'] > 0, engine
        assert figs['peak_rss_mb'] > 0 and figs['rss_after_load_mb'] > 0, engine
        assert r['memory'][engine]['rss_after_mb'] >= r['memory'][engine]['rss_before_mb'] > 0, engine
    assert r['results']['kopl-engine']['programs_per_s_forward_only'] >= r['results']['kopl-engine']['programs_per_s']
    assert r['results']['kopl-engine']['programs_run'] + r['results']['kopl-engine']['crashes'] <= 120


def test_kb_and_machine(report):
    r, _ = report
    assert r['kb'] == {'entities': 850, 'concepts': 40, 'relation_facts': 20_000, 'attribute_facts': 8_750, 'qualifiers': 15_000}
    assert r['machine']['cpu_count'] >= 1 and r['machine']['python'] and 'numpy' in r['machine']['packages']


def test_agreement_and_breakdown(report):
    r, out = report
    a = r['agreement']
    for k in ('ours_vs_kopl', 'ours_vs_kopl_engine', 'kopl_vs_kopl_engine'):
        assert 0 <= a[k] <= 1, k
    assert a['n_disagreements_with_kopl'] == round((1 - a['ours_vs_kopl']) * 120)
    assert len(a['disagreements_with_kopl']) == min(20, a['n_disagreements_with_kopl'])
    assert sum(t['n'] for t in r['per_template']) == 120
    assert all(t['ours_pps'] > 0 and t['kopl_pps'] > 0 for t in r['per_template'])
    assert set(r['targets']) >= {'throughput_vs_kopl', 'throughput_vs_kopl_engine', 'load_s', 'rss_after_load_mb', 'agreement_with_kopl'}
    assert all(isinstance(t['met'], bool) for t in r['targets'].values())
    assert out.with_suffix('.png').stat().st_size > 10_000
