"""Seconds per question of pipeline configurations, measured side by side with nothing cached.

    python scripts/time_configs.py [--configs single_call_paths,entity_demos_paths] [--n 24] [--out outputs/speed.json]

A rerun answers from the response cache and reports the seconds of the run that first asked, so a figure replayed from
the cache says nothing of the machine it is read on. This answers the same questions of the natural-wording dev set
with each configuration in turn, in one process, with the local Qwen2.5-Coder-1.5B and an empty response cache per
configuration, and prints and writes seconds per question with the machine's load. Run it on an idle machine.
"""
import argparse, json, os, tempfile, time
from pathlib import Path


def measure(name: str, questions: list, folder: Path, model: str, tmp: Path) -> dict:
    "One configuration on `questions`, its LLM answers in a fresh cache under `tmp`: accuracy, s/q, LLM calls/q."
    from kgqa_nb.datasets.kqapro import kqapro_stages
    from kgqa_nb.llm.presets import get_backend
    from kgqa_nb.systems.experiments import experiment_config
    from kgqa_nb.systems.pipeline import run_pipeline, read_records, summarize
    cfg = experiment_config(name, 'realistic')
    backend = get_backend(model, cache=tmp / f'{name}.sqlite', n_ctx=8192)
    stages = kqapro_stages(folder, backend, grounding=cfg.grounding, pool_size=1000, seed=0, schema=cfg.schema > 0)
    load, t = os.getloadavg()[0], time.perf_counter()
    run_pipeline(questions, cfg, stages, tmp / name / 'records.jsonl')
    wall = time.perf_counter() - t
    rs = list(read_records(tmp / name / 'records.jsonl').values())
    s = summarize(rs)['all'] if len({r['dataset'] for r in rs}) > 1 else next(iter(summarize(rs).values()))
    return dict(configuration=name, n=s['n'], accuracy=s['hits_at_1'], s_per_question=s['seconds'],
                wall_s_per_question=round(wall / len(rs), 2), llm_calls_per_question=s['llm_calls'],
                cached_calls=sum(r['llm']['cached'] for r in rs), load_before=round(load, 2),
                load_after=round(os.getloadavg()[0], 2))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--configs', default='single_call_paths,entity_demos_paths')
    p.add_argument('--n', type=int, default=24, help='questions of natural_dev (seeded sample)')
    p.add_argument('--model', default='qwen2.5-coder-1.5b')
    p.add_argument('--out', default='outputs/speed_natural_dev.json')
    a = p.parse_args()
    from kgqa_nb.datasets.benchgen import demo_benchmark
    from kgqa_nb.datasets.kqapro import kqapro_questions
    folder = demo_benchmark()
    questions = kqapro_questions(folder, 'natural_dev', a.n, 0)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(name, questions, folder, a.model, Path(tmp)) for name in a.configs.split(',')]
    for r in rows: print(f"{r['configuration']:>22}: {r['accuracy']:5.1f}% on {r['n']}, {r['s_per_question']:6.2f} s/q "
                         f"({r['wall_s_per_question']} wall), {r['llm_calls_per_question']} LLM calls/q, "
                         f"load {r['load_before']} -> {r['load_after']}")
    out = dict(split='natural_dev', model=a.model, cpus=os.cpu_count(), cache='empty per configuration', rows=rows)
    Path(a.out).write_text(json.dumps(out, indent=1) + '\n')


if __name__ == '__main__':
    main()
