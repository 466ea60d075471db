"Smoke tests of scripts/kge_device_check.py (ComplEx on a GPU, issue 33): on the CPU, on a tiny synthetic kb.txt."
import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path
import pytest

pytest.importorskip('torch')
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT/'scripts'/'kge_device_check.py'
TINY = ['--device', 'cpu', '--dim', '8', '--batch-size', '64', '--seconds', '3', '--max-epochs', '30',
        '--eval-every', '1', '--patience', '3', '--cpu-threads', '1', '--cpu-seconds', '0.2', '--threads', '1']


def tiny_kb(path: Path) -> Path:
    "A MetaQA-style kb.txt: 40 films, 3 relations with regular structure (120 lines, one duplicate)."
    lines = [f'film {i}|{r}|film {(i*k + 1) % 40}' for i in range(40) for r, k in (('sequel_of', 1), ('remake_of', 7),
                                                                                    ('similar_to', 3))]
    path.write_text('\n'.join(lines + lines[:1]) + '\n')
    return path


def load_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location('kge_device_check', SCRIPT)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def check_report(r: dict, out: Path):
    assert r['complete'] and r['device'] == 'cpu' and r['data']['triples'] == 120 and r['data']['relations'] == 3
    assert json.loads((out/'kge_gpu.json').read_text()) == json.loads(json.dumps(r))
    assert 1 <= r['epochs_run'] <= 30 and r['stop_reason'] in ('patience', 'time budget', 'max epochs')
    assert r['best_epoch'] in r['valid_curve']['epoch'] and r['best_valid_mrr'] == max(r['valid_curve']['mrr'])
    assert 0 < r['test']['mrr'] <= 1 and 0 <= r['test']['hits1'] <= r['test']['hits10'] <= 1
    spe = r['seconds_per_epoch']
    assert spe['cpu_run'] > 0 and spe['cpu_1_threads'] > 0 and r['cpu_timing'][0]['steps_timed'] >= 1
    assert r['config']['dim'] == 8 and r['config']['reg'] == 'n3' and r['total_seconds'] > 0


def test_script_smoke_on_cpu(tmp_path, capsys):
    out = tmp_path/'out'
    r = load_script().main(['--kb', str(tiny_kb(tmp_path/'kb.txt')), '--out', str(out), *TINY])
    check_report(r, out)
    assert capsys.readouterr().out.startswith('kge_device_check: ')


def _minimal_site(dest: Path) -> Path:
    "A folder holding only torch, numpy, fastcore and what they require (links into this environment): the GPU box's."
    from packaging.requirements import Requirement
    dest.mkdir()
    todo, seen = ['torch', 'numpy', 'fastcore'], set()
    while todo:
        name = todo.pop()
        if name.lower() in seen: continue
        seen.add(name.lower())
        dist = md.distribution(name)
        for f in dist.files or []:
            top = f.parts[0]
            if top != '..' and not (dest/top).exists(): (dest/top).symlink_to(Path(dist.locate_file(top)))
        for req in map(Requirement, dist.requires or []):
            if req.marker is None or req.marker.evaluate({'extra': ''}): todo.append(req.name)
    return dest


def test_script_runs_with_only_torch_and_numpy(tmp_path):
    "No tqdm, pandas, matplotlib, pykeen...: the script and kgqa_nb.kge need torch, numpy and fastcore only."
    site = _minimal_site(tmp_path/'site')
    out = tmp_path/'out'
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')} | {'PYTHONPATH': str(site)}
    probe = subprocess.run([sys.executable, '-S', '-c', 'import tqdm'], env=env, capture_output=True)
    assert probe.returncode != 0  # the minimal site really lacks tqdm
    p = subprocess.run([sys.executable, '-S', str(SCRIPT), '--kb', str(tiny_kb(tmp_path/'kb.txt')), '--out', str(out),
                        *TINY], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((out/'kge_gpu.json').read_text())
    assert r['tqdm_installed'] is False
    check_report(r, out)
