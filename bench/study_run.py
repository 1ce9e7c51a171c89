"""Wall-time breakdown of single runs of a study preset: compile, train, eval (per run).

    python bench/study_run.py [--config=configs/study/cpu.py] [--runs=llama-d32] [--json]

Trains and evaluates the named runs of the preset exactly as `python -m linscale_jax.study` does
(runner.process_run) in a fresh work directory, and splits each run's wall time into XLA compile
time (jax's backend_compile / cache-retrieval monitoring events), the rest of training, and the
rest of evaluation, from the run's timing.jsonl (runner.process_run writes it). Run it twice on
one --workdir-less preset to see the persistent compilation cache (trainer.enable_compilation_cache)
at work: the second process reads the compilations back.
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

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.parallel.host_memory)
    from linscale_jax.parallel import cpu_codegen, host_memory

    cpu_codegen.use_xla_fusions()  # the trainer's XLA:CPU fusions
    host_memory.use_huge_pages()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/study/cpu.py")
    p.add_argument("--runs", default="llama-d32", help="comma-separated run names (arch-size)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    from linscale_jax.study import files
    from linscale_jax.train import loop as trainer
    from linscale_jax.study.scaling import plan, runner

    spec = importlib.util.spec_from_file_location("_study_preset", a.config)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    study = mod.get_config()
    workdir = a.workdir or tempfile.mkdtemp(prefix="study_run_")
    runs = {r.name: r for r in plan.build_plan(study, workdir)}
    print(f"compilation cache: {trainer.enable_compilation_cache()}", flush=True)
    for name in a.runs.split(","):
        run = runs[name]
        t0 = time.perf_counter()
        runner.process_run(study, run, log=lambda m: None)  # train + evaluate, as the study does
        timing = json.loads((Path(run.workdir) / files.TIMING).read_text().splitlines()[-1])
        row = dict(run=name, wall_s=round(time.perf_counter() - t0, 1),
                   **{k: round(timing[k], 1) for k in ("train_s", "train_compile_s", "eval_s",
                                                       "eval_compile_s")})
        print(json.dumps(row) if a.json else row, flush=True)


if __name__ == "__main__":
    main()
