"""Wall-time breakdown of single runs of a study preset: compile, train, eval (per run).

    python bench/study_run.py [--config=configs/study/cpu.py] [--runs=llama-d16] [--json]

Trains and evaluates the named runs of the preset exactly as `python -m linscale_jax.study` does
(runner.process_run) in a fresh work directory, and splits each run's wall time into XLA compile
time (jax's backend_compile / cache-retrieval monitoring events), the rest of training, and the
rest of evaluation. Run it twice to see the persistent compilation cache (trainer.
enable_compilation_cache) at work: the second process reads the compilations back.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

_COMPILE = {"s": 0.0}


def _listener(event: str, duration: float, **_):
    if event in ("/jax/core/compile/backend_compile_duration",
                 "/jax/compilation_cache/cache_retrieval_time_sec"):
        _COMPILE["s"] += duration


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/study/cpu.py")
    p.add_argument("--runs", default="llama-d16", help="comma-separated run names (arch-size)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    from linscale_jax import trainer
    from study import plan, runner

    jax.monitoring.register_event_duration_secs_listener(_listener)
    spec = importlib.util.spec_from_file_location("_study_preset", a.config)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    study = mod.get_config()
    workdir = a.workdir or tempfile.mkdtemp(prefix="study_run_")
    runs = {r.name: r for r in plan.build_plan(study, workdir)}
    print(f"compilation cache: {trainer.enable_compilation_cache()}", flush=True)
    for name in a.runs.split(","):
        run = runs[name]
        c0, t0 = _COMPILE["s"], time.perf_counter()
        trainer.train(run.config, run.workdir)
        c1, t1 = _COMPILE["s"], time.perf_counter()
        runner.process_run(study, run, log=lambda m: None)  # trained: evaluation only
        c2, t2 = _COMPILE["s"], time.perf_counter()
        row = dict(run=name, wall_s=round(t2 - t0, 1), train_s=round(t1 - t0, 1),
                   train_compile_s=round(c1 - c0, 1), eval_s=round(t2 - t1, 1),
                   eval_compile_s=round(c2 - c1, 1))
        print(json.dumps(row) if a.json else row, flush=True)


if __name__ == "__main__":
    main()
