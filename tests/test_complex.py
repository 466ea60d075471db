"Fast tests of the ComplEx trainer, its filtered evaluation and the dual KG embeddings (the kgqa_nb.kge modules)."
import os
import shlex
from dataclasses import asdict, replace
from pathlib import Path
import numpy as np
import pytest

torch = pytest.importorskip('torch')
from kgqa_nb.kge.triples import kg_literal_triples, kg_triples, single_kge_triples, split_triples
from kgqa_nb.kge.models import ComplEx, DualConfig, literal_features
from kgqa_nb.kge.evaluation import AnswerIndex, evaluate, evaluate_literals, filtered_ranks
from kgqa_nb.kge.training import TrainConfig, train_complex, train_literals, read_checkpoint, CheckpointError
from kgqa_nb.core import KGQAError, package_data
from kgqa_nb.kg.store import load_kb
from kgqa_nb.systems.resolver import load_complex

# A small graph with structure: 3 communities of 6 nodes; 'likes' links within a community (both ways),
# 'next' maps community c's node i to community c+1's node i (a permutation: 1-1 and learnable).
def toy_graph():
    likes = [[6*c + i, 0, 6*c + j] for c in range(3) for i in range(6) for j in range(6) if i != j and (i + j) % 2 == 0]
    nxt = [[6*c + i, 1, 6*((c + 1) % 3) + i] for c in range(3) for i in range(6)]
    return np.array(likes + nxt, dtype=np.int64)

FAST = TrainConfig(dim=16, epochs=80, batch_size=64, lr=0.05, reg_weight=1e-4, init_scale=0.1, eval_every=0,
                   progress=False, num_threads=1, device='cpu')  # the CPU: exact resumption is tested bit for bit


def test_learns_toy_graph_to_mrr_one():
    g = toy_graph()
    model, hist = train_complex(g, 18, 2, FAST)
    m = evaluate(model, g, AnswerIndex(g, 2))
    assert m.mrr == 1.0 and m.hits1 == 1.0, m
    assert hist.epoch_loss[-1] < 0.5 * hist.epoch_loss[0]  # several true tails per query: CE cannot reach 0


def test_resume_gives_identical_weights(tmp_path):
    g = toy_graph()
    full, full_hist = train_complex(g, 18, 2, FAST)
    cfg = replace(FAST, checkpoint_every=7, checkpoint_dir=str(tmp_path))
    _, part = train_complex(g, 18, 2, cfg, stop_after=30)  # "interrupted" after epoch 30 (checkpoint at 28... and 30)
    assert len(part.epoch_loss) == 30 and (tmp_path/'last.pt').exists()
    resumed, hist = train_complex(g, 18, 2, cfg)
    assert torch.equal(full.node.weight, resumed.node.weight)
    assert torch.equal(full.rel.weight, resumed.rel.weight)
    assert hist.epoch_loss == full_hist.epoch_loss


def test_resume_from_an_earlier_checkpoint_also_matches(tmp_path):
    "An interruption between checkpoints loses the epochs after the last checkpoint but not the result."
    g = toy_graph()
    full, _ = train_complex(g, 18, 2, FAST)
    cfg = replace(FAST, checkpoint_every=10, checkpoint_dir=str(tmp_path))
    train_complex(g, 18, 2, cfg, stop_after=20)
    resumed, _ = train_complex(g, 18, 2, cfg)
    assert torch.equal(full.node.weight, resumed.node.weight)


def test_checkpoint_from_other_config_is_refused(tmp_path):
    g = toy_graph()
    cfg = replace(FAST, epochs=5, checkpoint_every=5, checkpoint_dir=str(tmp_path))
    train_complex(g, 18, 2, cfg)
    with pytest.raises(KGQAError, match='checkpoint'):
        train_complex(g, 18, 2, replace(cfg, lr=0.01, epochs=10))



class _Payload:
    "What a tampered checkpoint could hold: unpickling it runs a shell command that creates `marker`."
    def __init__(self, marker: Path): self.marker = marker
    def __reduce__(self): return (os.system, (f'touch {shlex.quote(str(self.marker))}',))


def test_checkpoints_load_with_weights_only_and_resume_with_plain_config(tmp_path):
    "Written with a Path checkpoint_dir and a numpy lr, the checkpoint is still plain: weights_only=True reads it back."
    g = toy_graph()
    cfg = replace(FAST, epochs=6, checkpoint_every=3, checkpoint_dir=tmp_path, lr=np.float64(0.05))
    train_complex(g, 18, 2, cfg, stop_after=3)
    ck = torch.load(tmp_path/'last.pt', weights_only=True)
    assert ck['epoch'] == 3 and ck['config']['checkpoint_dir'] == str(tmp_path) and type(ck['config']['lr']) is float
    resumed, hist = train_complex(g, 18, 2, cfg)
    full, full_hist = train_complex(g, 18, 2, replace(cfg, checkpoint_every=0, checkpoint_dir=None))
    assert torch.equal(full.node.weight, resumed.node.weight) and hist.epoch_loss == full_hist.epoch_loss
    assert load_complex(str(tmp_path/'last.pt')).n_relations == 2


def test_tampered_checkpoint_is_refused_and_its_payload_never_runs(tmp_path):
    g = toy_graph()
    cfg = replace(FAST, epochs=3, checkpoint_every=3, checkpoint_dir=str(tmp_path))
    train_complex(g, 18, 2, cfg)
    ck = torch.load(tmp_path/'last.pt', weights_only=True)
    marker = tmp_path/'payload-ran'
    torch.save({**ck, 'history': _Payload(marker)}, tmp_path/'last.pt')  # a tampered resume checkpoint
    for load in (lambda: read_checkpoint(tmp_path/'last.pt'), lambda: load_complex(str(tmp_path/'last.pt')),
                 lambda: train_complex(g, 18, 2, replace(cfg, epochs=6))):
        with pytest.raises(CheckpointError, match=r'posix\.system.*re-train'): load()
    assert not marker.exists()


def test_old_format_checkpoint_asks_for_retraining(tmp_path):
    "An object weights_only=True cannot read (here a PosixPath in the config, as asdict(cfg) once wrote) is refused."
    model = ComplEx(18, 2, 4)
    torch.save({'model': model.state_dict(), 'config': {**asdict(FAST), 'checkpoint_dir': tmp_path}}, tmp_path/'old.pt')
    with pytest.raises(CheckpointError, match='PosixPath.*delete it and re-train with train_complex'):
        load_complex(str(tmp_path/'old.pt'))
    assert issubclass(CheckpointError, KGQAError)


def test_device_option():
    "'auto' is the CPU where there is no GPU (same numbers as 'cpu'); the model always comes back on the CPU."
    g = toy_graph()
    cpu, h_cpu = train_complex(g, 18, 2, replace(FAST, epochs=5))
    auto, h_auto = train_complex(g, 18, 2, replace(FAST, epochs=5, device='auto'))
    assert cpu.node.weight.device.type == auto.node.weight.device.type == 'cpu' and len(h_cpu.epoch_seconds) == 5
    if not torch.cuda.is_available():
        assert h_auto.epoch_loss == h_cpu.epoch_loss and torch.equal(auto.node.weight, cpu.node.weight)
        with pytest.raises(KGQAError, match='no CUDA GPU'): train_complex(g, 18, 2, replace(FAST, device='cuda:0'))
    with pytest.raises(KGQAError, match="'auto', 'cpu', 'cuda' or 'cuda:N'"):
        train_complex(g, 18, 2, replace(FAST, device='gpu'))


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')
def test_gpu_training_is_close_to_cpu_and_checkpoints_load_on_cpu(tmp_path):
    g = toy_graph()
    _, h_cpu = train_complex(g, 18, 2, replace(FAST, epochs=20))
    gpu, h_gpu = train_complex(g, 18, 2, replace(FAST, epochs=20, device='cuda', checkpoint_every=10,
                                                 checkpoint_dir=str(tmp_path)))
    assert gpu.node.weight.device.type == 'cpu' and np.allclose(h_gpu.epoch_loss, h_cpu.epoch_loss, atol=1e-3)
    ck = read_checkpoint(tmp_path/'last.pt')
    assert all(t.device.type == 'cpu' for t in ck['model'].values())
    ans = AnswerIndex(g, 2)
    assert evaluate(gpu.to('cuda'), g, ans).mrr == pytest.approx(evaluate(gpu.cpu(), g, ans).mrr)


def test_filtered_rank_hand_example():
    # scores of nodes 0..4 for one query whose answer is node 2 (score 3)
    s = torch.tensor([[5., 3., 3., 3., 9.]])
    none = (np.array([], int), np.array([], int))
    # unfiltered: nodes 0 and 4 better, nodes 1 and 3 tie -> 1 + 2 + 2/2
    assert filtered_ranks(s, torch.tensor([2]), *none).item() == 4.0
    # node 4 is another true answer -> filtered out: 1 + 1 + 2/2
    assert filtered_ranks(s, torch.tensor([2]), np.array([0]), np.array([4])).item() == 3.0
    # filtering the answer itself changes nothing
    assert filtered_ranks(s, torch.tensor([2]), np.array([0, 0]), np.array([4, 2])).item() == 3.0
    # all ties filtered too
    assert filtered_ranks(s, torch.tensor([2]), np.array([0, 0, 0, 0]), np.array([0, 1, 3, 4])).item() == 1.0


def test_evaluate_filters_against_all_known_triples():
    "A model that scores every node equally: each rank is 1 + (#unfiltered candidates - 1)/2."
    m = ComplEx(5, 1, dim=2)
    with torch.no_grad(): m.node.weight.zero_(); m.rel.weight.zero_()
    known = np.array([[0, 0, 1], [0, 0, 2], [3, 0, 4]])
    res = evaluate(m, known[:1], AnswerIndex(known, 1), directions='tail')
    # query (0, r, ?) answer 1; node 2 filtered; the other 3 nodes (0, 3, 4) tie -> rank 1 + 3/2
    assert res.mrr == pytest.approx(1/2.5)
    res = evaluate(m, known[:1], AnswerIndex(known, 1), directions='head')
    # query (?, r, 1) answer 0; no other known head -> 4 ties -> rank 3
    assert res.mrr == pytest.approx(1/3)


def test_answer_index_pairs_include_reciprocals():
    known = np.array([[0, 0, 1], [0, 0, 2], [2, 1, 0]])
    ans = AnswerIndex(known, 2)
    rows, cols = ans.pairs(np.array([0, 1, 0]), np.array([0, 2, 3]))
    got = sorted(zip(rows.tolist(), cols.tolist()))
    assert got == [(0, 1), (0, 2), (1, 0), (2, 2)]


def test_split_moves_unseen_nodes_back_to_train():
    g = toy_graph()
    sp = split_triples(g, 0.2, 0.2, seed=3)
    assert len(sp.train) + len(sp.valid) + len(sp.test) == len(g)
    seen = set(sp.train[:, 0]) | set(sp.train[:, 2])
    assert all(h in seen and t in seen for h, _, t in np.concatenate([sp.valid, sp.test]))
    assert np.array_equal(split_triples(g, 0.2, 0.2, seed=3).test, sp.test)  # seeded


def test_regularisers_and_bad_option():
    g = toy_graph()
    for reg in ('n3', 'l2', None):
        _, h = train_complex(g, 18, 2, replace(FAST, epochs=3, reg=reg))
        assert np.isfinite(h.epoch_loss).all()
    with pytest.raises(KGQAError, match='reg'):
        train_complex(g, 18, 2, replace(FAST, epochs=1, reg='l1'))


def test_early_stopping_restores_best():
    g = toy_graph()
    cfg = replace(FAST, epochs=200, eval_every=5, patience=2)
    model, h = train_complex(g, 18, 2, cfg, valid_ids=g)
    assert h.stopped_early and h.best_epoch == h.eval_epoch[int(np.argmax(h.eval_mrr))]
    assert evaluate(model, g, AnswerIndex(g, 2)).mrr == pytest.approx(max(h.eval_mrr))


def test_kg_triples_and_literals_from_demo_kb():
    kg = load_kb(package_data('demo_kb.json'))
    tr, lt = kg_triples(kg), kg_literal_triples(kg)
    assert len(np.unique(tr.ids, axis=0)) == len(tr.ids)
    fwd = kg.rel_dir == 0
    facts = set(map(tuple, tr.ids.tolist()))
    assert all((s, r, o) in facts for s, r, o in zip(kg.rel_src[fwd].tolist(), kg.rel_rel[fwd].tolist(), kg.rel_obj[fwd].tolist()))
    bwd = ~fwd
    assert all((o, r, s) in facts for s, r, o in zip(kg.rel_src[bwd].tolist(), kg.rel_rel[bwd].tolist(), kg.rel_obj[bwd].tolist()))
    isa = tr.ids[tr.ids[:, 1] == tr.relations.index('instance of')]
    assert kg.is_concept[isa[:, 2]].all() and len(isa) == sum(len(p) for p in kg.parents)
    # every attribute fact maps to a literal whose text is the fact's value
    for i in range(0, kg.n_attr, 97):
        lit = lt.ids[(lt.ids[:, 0] == kg.attr_ent[i]) & (lt.ids[:, 1] == kg.attr_key[i]), 2]
        assert str(kg.value(kg.attr_val, i)) in {lt.literals[j] for j in lit}
    assert literal_features(lt).shape[0] == len(lt.literals)


def test_dual_step_two_keeps_step_one_frozen_and_learns_literals():
    kg = load_kb(package_data('fixture_kb.json'))
    tr, lt = kg_triples(kg), kg_literal_triples(kg)
    base, _ = train_complex(tr.ids, tr.n_nodes, tr.n_relations, replace(FAST, epochs=20))
    before = {k: v.clone() for k, v in base.state_dict().items()}
    for init in ('random', 'features', 'encoder'):
        dual, losses = train_literals(base, lt.ids, len(lt.literals), len(lt.keys),
                                      DualConfig(epochs=60, lr=0.05, init_scale=0.1, init=init, progress=False), literal_features(lt))
        assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())
        assert losses[-1] < losses[0]
        m = evaluate_literals(dual.score_literals, lt.ids, lt.ids, len(lt.keys))
        assert m.mrr > 0.5, m  # the training facts are fitted
    with pytest.raises(KGQAError, match='features'):
        train_literals(base, lt.ids, len(lt.literals), len(lt.keys), DualConfig(epochs=1, init='features', progress=False))


def test_single_kge_triples_id_spaces():
    ent = np.array([[0, 0, 1]]); lit = np.array([[1, 0, 0], [0, 1, 2]])
    s = single_kge_triples(ent, lit, n_nodes=2, n_relations=1)
    assert s.tolist() == [[0, 0, 1], [1, 1, 2], [0, 2, 4]]


def test_bench_notebook_quick_smoke(tmp_path):
    "bench_complex.ipynb in quick mode (UMLS/Kinships side by side and the dual ablation) writes its JSON and PNG."
    papermill = pytest.importorskip('papermill')
    pytest.importorskip('pykeen')
    import json
    nbs = Path(__file__).resolve().parents[1] / 'nbs' / 'experiments'
    papermill.execute_notebook(str(nbs / 'bench_complex.ipynb'), str(tmp_path / 'bench_complex.ipynb'),
                               parameters={'quick': True, 'parts': 'lp,dual', 'threads': 1, 'out_dir': str(tmp_path)},
                               cwd=str(nbs), kernel_name='python3', progress_bar=False)
    r = json.loads((tmp_path / 'bench_complex_quick.json').read_text())
    assert {row['dataset'] for row in r['link_prediction']} == {'UMLS', 'Kinships'}
    assert {row['system'].split()[0] for row in r['link_prediction']} == {'kgqa_nb', 'pykeen'}
    assert {row.get('setting') for row in r['link_prediction'] if row['system'].startswith('pykeen')} == {'defaults', 'strongest', 'benchmark_best'}
    assert all(0 < row['mrr'] <= 1 and row['seconds'] > 0 for row in r['link_prediction'])
    assert [a['dataset'] for a in r['dual_vs_single']] == ['Nations', 'demo KB']
    assert (tmp_path / 'bench_complex_quick.png').exists()
