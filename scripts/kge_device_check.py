#!/usr/bin/env python3
"""ComplEx on the MetaQA KB on a GPU: epochs to convergence, test MRR, and seconds per epoch against the CPU.

Issue 33, item 5. Trains the project's own ComplEx (`kgqa_nb.kge.training.train_complex`: 1-N cross-entropy, reciprocal
relations, N3; dim 200, batch 1,000, Adam lr 1e-2, N3 weight 5e-3 by default) on the MetaQA KB (`head|relation|tail`
lines) within a time budget, evaluating filtered MRR on the validation split every `--eval-every` epochs and stopping
after `--patience` evaluations without a better one (the best weights are restored). Then filtered test MRR and
Hits@1/3/10 (head and tail queries, realistic ranks), and the time of a training epoch on the CPU of the same machine
(with 16 and with 2 threads by default: a few steps timed, extrapolated to an epoch). The split is `bench_complex`'s
(kg_triples of `load_kb`, 5% valid, 5% test, seed 0), so the numbers compare with its CPU run.

Needs only torch, numpy and fastcore (pure Python: `pip install fastcore`, or this environment's `fastcore` folder on
PYTHONPATH; the KG store builds its classes with fastcore's `@patch`); tqdm is used when installed. Run from the
repository root, without installing kgqa_nb:

    python3 scripts/kge_device_check.py --kb PATH/kb.txt --out OUTDIR --seconds 240

It writes OUTDIR/kge_gpu.json (rewritten after each phase: a run cut short keeps what it measured) and prints a
one-line summary. A smoke run on the CPU: `--device cpu --max-triples 5000 --seconds 20 --cpu-seconds 2`.
"""
from __future__ import annotations
import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kgqa_nb from this checkout


class _NoBar:
    "The trainer's progress bar where tqdm is not installed (the bar is switched off here anyway)."
    def __init__(self, iterable=None, *args, **kwargs): self.iterable = iterable
    def __iter__(self): return iter(self.iterable)
    def set_postfix(self, *args, **kwargs): pass
    def close(self): pass


def _without_tqdm() -> bool:
    "Where tqdm is not installed, make kgqa_nb.kge.training use `_NoBar`; True when it is installed."
    try: import tqdm  # noqa: F401
    except ImportError: pass
    else: return True
    import kgqa_nb.kge.training
    kgqa_nb.kge.training.progress_bar = _NoBar
    return False


def _cpu_name() -> str:
    "The CPU model from /proc/cpuinfo (Linux), else what `platform` knows."
    try: return next(l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name'))
    except (OSError, StopIteration): return platform.processor() or platform.machine()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    a = p.add_argument
    a('--kb', required=True, help='MetaQA kb.txt (head|relation|tail per line)')
    a('--out', required=True, help='folder for kge_gpu.json')
    a('--seconds', type=float, default=240, help='training budget on the device (validation included)')
    a('--device', default='cuda', help="'cuda', 'cuda:N', 'cpu' or 'auto'")
    a('--max-triples', type=int, default=0, help='use a seeded sample of this many triples (0: all)')
    a('--dim', type=int, default=200, help='complex dimension')
    a('--batch-size', type=int, default=1000, help='queries per step')
    a('--lr', type=float, default=1e-2, help='Adam learning rate')
    a('--reg-weight', type=float, default=5e-3, help='N3 weight')
    a('--max-epochs', type=int, default=1000, help='epoch limit (the time budget or patience usually stop first)')
    a('--eval-every', type=int, default=2, help='epochs between validation evaluations')
    a('--patience', type=int, default=5, help='stop after this many evaluations without a better valid MRR')
    a('--valid-sample', type=int, default=0, help='validate on a seeded sample of this many triples (0: all)')
    a('--eval-batch', type=int, default=1000, help='queries per scoring batch in evaluation')
    a('--tf32', action='store_true', help='allow TF32 matmuls in the main run (default: full fp32)')
    a('--cpu-threads', default='16,2', help="thread counts for the CPU timing ('' to skip it)")
    a('--cpu-seconds', type=float, default=15, help='about this long timing each CPU thread count')
    a('--threads', type=int, default=min(16, os.cpu_count() or 1), help='torch threads during the device run')
    a('--seed', type=int, default=0)
    return p.parse_args(argv)


def time_cpu(train, n_nodes: int, n_rel: int, cfg, threads: int, budget: float, steps_per_epoch: int) -> dict:
    "Seconds per CPU training step with `threads` threads, from as many full batches as fit in about `budget` s."
    from kgqa_nb.kge.training import train_complex
    def run(steps):  # one epoch of the trainer over `steps` batches' worth of triples (2 queries per triple)
        sub = train if steps >= steps_per_epoch else train[:max(1, steps*cfg.batch_size//2)]
        c = replace(cfg, epochs=1, eval_every=0, patience=0, max_seconds=None, checkpoint_every=0,
                    num_threads=threads, device='cpu')
        return train_complex(sub, n_nodes, n_rel, c)[1].epoch_seconds[0]
    first = run(1)  # warm-up (allocation, thread pool) and a first estimate
    steps = int(min(steps_per_epoch, max(2, budget/max(first, 1e-6))))
    secs = run(steps)
    return {'threads': threads, 'steps_timed': steps, 'seconds_timed': secs, 'seconds_per_step': secs/steps,
            'seconds_per_epoch': secs/steps*steps_per_epoch, 'extrapolated': steps < steps_per_epoch,
            'first_step_seconds': first}


def main(argv=None) -> dict:
    args = parse_args(argv)
    t_start = time.perf_counter()
    import numpy as np
    import torch
    from kgqa_nb.kg.store import load_kb
    from kgqa_nb.kge.triples import kg_triples, split_triples
    from kgqa_nb.kge.evaluation import AnswerIndex, evaluate
    from kgqa_nb.kge.training import TrainConfig, pick_device, train_complex
    has_tqdm = _without_tqdm()
    out = Path(args.out); out.mkdir(parents=True, exist_ok=True)
    dev = pick_device(args.device)
    cuda = dev.type == 'cuda'
    run = 'gpu' if cuda else 'cpu_run'  # the main run's key in seconds_per_epoch
    rep = {'script': 'scripts/kge_device_check.py', 'complete': False, 'argv': sys.argv[1:] if argv is None else argv,
           'device': str(dev), 'device_name': torch.cuda.get_device_name(dev) if cuda else _cpu_name(),
           'cpu_name': _cpu_name(), 'torch': torch.__version__, 'cuda': torch.version.cuda, 'numpy': np.__version__,
           'python': platform.python_version(), 'cpu_count': os.cpu_count(), 'tf32': args.tf32,
           'tqdm_installed': has_tqdm}
    def save(): (out/'kge_gpu.json').write_text(json.dumps(rep, indent=1))
    def say(msg): print(f'[{time.perf_counter() - t_start:6.1f}s] {msg}', file=sys.stderr, flush=True)

    t = time.perf_counter()
    kg = load_kb(args.kb)
    trip = kg_triples(kg, with_concepts=False)
    ids = trip.ids
    if args.max_triples: ids = ids[np.random.default_rng(args.seed).permutation(len(ids))[:args.max_triples]]
    sp = split_triples(ids, 0.05, 0.05, seed=args.seed)
    ans = AnswerIndex(sp.all(), trip.n_relations)
    valid = sp.valid
    if args.valid_sample and args.valid_sample < len(valid):
        valid = valid[np.random.default_rng(args.seed).choice(len(valid), args.valid_sample, replace=False)]
    steps_per_epoch = -(-2*len(sp.train) // args.batch_size)
    rep['data'] = {'kb': str(args.kb), 'triples': int(len(ids)), 'entities': trip.n_nodes,
                   'relations': trip.n_relations, 'train': int(len(sp.train)), 'valid': int(len(sp.valid)),
                   'test': int(len(sp.test)), 'moved_to_train': sp.moved_to_train, 'valid_evaluated': int(len(valid)),
                   'steps_per_epoch': steps_per_epoch, 'load_seconds': time.perf_counter() - t}
    say(f"{rep['data']['triples']:,} triples, {trip.n_nodes:,} entities; training on {dev} "
        f"({rep['device_name']}) for {args.seconds:g} s")
    save()

    cfg = TrainConfig(dim=args.dim, epochs=args.max_epochs, batch_size=args.batch_size, lr=args.lr, reg='n3',
                      reg_weight=args.reg_weight, eval_every=args.eval_every, patience=args.patience, seed=args.seed,
                      num_threads=args.threads, max_seconds=args.seconds, progress=False, device=str(dev))
    rep['config'] = asdict(cfg)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.cuda.reset_peak_memory_stats(dev)
    model, hist = train_complex(sp.train, trip.n_nodes, trip.n_relations, cfg, valid_ids=valid, answers=ans)
    es = hist.epoch_seconds
    stop = ('patience' if hist.stopped_early else 'time budget' if hist.seconds >= args.seconds else 'max epochs')
    best = int(np.argmax(hist.eval_mrr)) if hist.eval_mrr else None
    rep.update({'epochs_run': len(hist.epoch_loss), 'stop_reason': stop, 'train_seconds': hist.seconds,
                'best_epoch': hist.best_epoch, 'best_valid_mrr': hist.eval_mrr[best] if best is not None else None,
                'valid_curve': {'epoch': hist.eval_epoch, 'mrr': hist.eval_mrr}, 'epoch_loss': hist.epoch_loss,
                'epoch_seconds': es,
                'seconds_per_epoch': {run: float(np.mean(es[1:] if len(es) > 1 else es)),  # after warm-up
                                      f'{run}_first_epoch': es[0]}})
    say(f"{len(es)} epochs ({stop}), best valid MRR {rep['best_valid_mrr']} at epoch {hist.best_epoch}")
    save()

    t = time.perf_counter()
    m = evaluate(model.to(dev), sp.test, ans, batch_size=args.eval_batch)
    rep['test'] = {**asdict(m), 'eval_seconds': time.perf_counter() - t, 'device': str(dev)}
    if cuda:
        rep['gpu_peak_memory_gib'] = torch.cuda.max_memory_allocated(dev) / 2**30
        torch.backends.cuda.matmul.allow_tf32 = not args.tf32  # the other precision, 3 epochs, for its speed
        _, h = train_complex(sp.train, trip.n_nodes, trip.n_relations,
                             replace(cfg, epochs=3, eval_every=0, patience=0, max_seconds=None))
        rep['seconds_per_epoch']['gpu_fp32' if args.tf32 else 'gpu_tf32'] = float(np.mean(h.epoch_seconds[1:]))
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    say(f"test MRR {m.mrr:.4f} H@1 {m.hits1:.4f} H@10 {m.hits10:.4f}")
    save()

    rep['cpu_timing'] = []
    for n in [int(x) for x in args.cpu_threads.split(',') if x.strip()]:
        r = time_cpu(sp.train, trip.n_nodes, trip.n_relations, cfg, n, args.cpu_seconds, steps_per_epoch)
        rep['cpu_timing'].append(r); rep['seconds_per_epoch'][f'cpu_{n}_threads'] = r['seconds_per_epoch']
        say(f"CPU, {n} threads: {r['seconds_per_epoch']:.1f} s/epoch ({r['steps_timed']} steps timed)")
        save()
    torch.set_num_threads(args.threads)
    rep['total_seconds'] = time.perf_counter() - t_start
    rep['complete'] = True
    save()
    spe = rep['seconds_per_epoch']
    cpu = ', '.join(f"{k.split('_')[1]} thr {v:.1f}" for k, v in spe.items() if k.endswith('_threads'))
    best_mrr = rep['best_valid_mrr'] if rep['best_valid_mrr'] is not None else float('nan')
    print(f"kge_device_check: {rep['device_name']} ({dev}, torch {torch.__version__}) | {rep['epochs_run']} epochs "
          f"in {hist.seconds:.0f} s, stop: {stop} | s/epoch {run} {spe[run]:.2f}"
          + ''.join(f', {k[4:]} {spe[k]:.2f}' for k in ('gpu_tf32', 'gpu_fp32') if k in spe)
          + (f'; CPU {cpu}' if cpu else '')
          + f" | best valid MRR {best_mrr:.4f} at epoch {rep['best_epoch']} | test MRR {m.mrr:.4f} "
          f"H@1 {m.hits1:.4f} H@10 {m.hits10:.4f} | total {rep['total_seconds']:.0f} s -> {out/'kge_gpu.json'}")
    return rep


if __name__ == '__main__':
    main()
