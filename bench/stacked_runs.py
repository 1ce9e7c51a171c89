"""Runs of one shape stacked into one program (jax.vmap over replicate seeds), against each run alone.

    python bench/stacked_runs.py [--config=cpu] [--runs=llama-d16l2,llama-d48] [--k=1,2,4,8]
                                 [--steps=40] [--core=0] [--tpu=v5e] [--json]

For each run of the preset (its own config: model, the tuned rule's lr, batch and beta2) and each
k, the run's train step vmapped over k stacked copies of its parameters, optimizer state and
batches (k seeds of one cell), on one pinned core with single-threaded XLA as the study's workers
run. CPU: CPU seconds per step of the stacked program against k times the step alone, side by side
in one process (`per_run_speedup` > 1: stacking is faster per run). TPU, on paper: the stacked step
lowered for TPU from this CPU (jax.export, platforms=["tpu"]), its dot_generals read from the
StableHLO; `mxu_occupancy` is the share of the systolic array's cells a matmul keeps busy (its
contracting and output widths against --tpu's MXU side, FLOP-weighted over the step's matmuls),
`ops_per_run` the StableHLO operations of the step over k. --json prints one JSON object per (run, k).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def stacked_step(config, k: int, devices=None):
    """(jitted step over k stacked runs, fns, mesh): step(params [k, ...], opt_state [k, ...], rest,
    batch [k, b, t]) -> (params, opt_state, metrics [k]): the run's train step (train.loop's own,
    its optimizer and schedule, the rate a constant) under jax.vmap, donating params and optimizer
    state."""
    import jax

    from linscale_jax.models import ModelConfig
    from linscale_jax.parallel import sharding
    from linscale_jax.train import loop as trainer
    from linscale_jax.train import optim
    from linscale_jax.train import programs

    fns, mesh = trainer.step_functions(config, devices)
    model_cfg = ModelConfig.from_config(config.model)
    parts = sharding.model_parts(model_cfg, int(config.train.seed))
    tx = optim.make_optimizer(config.optim, int(config.train.steps), parts.param_axes,
                              parts.abstract_params)
    step = trainer.make_train_step(parts.graphdef, lambda _: tx, int(config.train.grad_accum))
    vmapped = jax.vmap(lambda p, o, r, b: step(p, o, r, b, None), in_axes=(0, 0, None, 0))
    return jax.jit(programs._under_mesh(vmapped, mesh), donate_argnums=(0, 1)), fns, mesh


def stacked_inputs(config, fns, k: int):
    """k copies of the run's initial parameters and optimizer state stacked [k, ...] (the time of a
    step does not depend on the seed), the rest, and k random batches [k, b, t]."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params = fns.init_params()
    opt = jax.tree.map(lambda x: jnp.stack([x] * k), fns.init_opt(params))
    params = jax.tree.map(lambda x: jnp.stack([x] * k), params)
    b, t = int(config.train.batch_size), int(config.train.seq_len)
    tok = np.random.default_rng(0).integers(0, 256, (k, b, t + 1), dtype=np.int32)
    batch = dict(inputs=tok[..., :-1], targets=tok[..., 1:], segment_ids=np.ones((k, b, t), np.int32),
                 weights=np.ones((k, b, t), np.float32))
    return params, opt, fns.rest(), {key: jnp.asarray(v) for key, v in batch.items()}


def cpu_seconds_per_step(step, args, steps: int) -> float:
    """Median CPU seconds per call of `step` over `steps` calls (after one warm-up call)."""
    import jax
    import numpy as np

    params, opt, rest, batch = args
    params, opt, m = step(params, opt, rest, batch)
    jax.block_until_ready(m)
    times = []
    for _ in range(3):
        t = time.process_time()
        for _ in range(steps):
            params, opt, m = step(params, opt, rest, batch)
        jax.block_until_ready((params, m))
        times.append((time.process_time() - t) / steps)
    return float(np.median(times))


_DOT = re.compile(r"stablehlo\.dot_general.*?(?:batching_dims = \[([\d, ]*)\] x \[[\d, ]*\], )?"
                  r"contracting_dims = \[([\d, ]*)\] x \[([\d, ]*)\].*?: \(tensor<([^>]*)>, "
                  r"tensor<([^>]*)>\) -> tensor<([^>]*)>")


def _dims(spec: str) -> list[int]:
    return [int(x) for x in spec.split("x")[:-1]]  # "4x128x16xf32" -> [4, 128, 16]


def dot_shapes(mlir: str) -> list[tuple[int, int, int, int]]:
    """(batch, M, K, N) of every stablehlo.dot_general of a module's text: batch the product of
    the batching dims, K of the contracting dims, M and N of the lhs's and rhs's other dims."""
    out = []
    for m in _DOT.finditer(mlir):
        batch_dims = [int(x) for x in (m.group(1) or "").replace(" ", "").split(",") if x]
        lc = [int(x) for x in m.group(2).replace(" ", "").split(",") if x]
        rc = [int(x) for x in m.group(3).replace(" ", "").split(",") if x]
        lhs, rhs = _dims(m.group(4)), _dims(m.group(5))
        nb = len(batch_dims)
        batch = math.prod(lhs[d] for d in batch_dims)
        k = math.prod(lhs[d] for d in lc)
        m_ = math.prod(x for i, x in enumerate(lhs) if i not in lc and i not in batch_dims)
        n = math.prod(x for i, x in enumerate(rhs) if i not in rc and i >= nb)
        out.append((batch, m_, k, n))
    return out


def mxu_occupancy(shapes, mxu: int) -> float:
    """FLOP-weighted share of the mxu x mxu array's cells the matmuls keep busy: a matmul's K x N
    weights are laid on the array in ceil(K/mxu) x ceil(N/mxu) tiles; the batch and M stream."""
    useful = sum(b * m * k * n for b, m, k, n in shapes)
    padded = sum(b * m * math.ceil(k / mxu) * mxu * math.ceil(n / mxu) * mxu for b, m, k, n in shapes)
    return useful / padded if padded else float("nan")


def tpu_lowering(config, k: int, mxu: int) -> dict:
    """The stacked step exported for TPU from this machine: its matmuls' MXU occupancy and its
    StableHLO operations per run."""
    import jax

    step, fns, _ = stacked_step(config, k)
    params, opt, rest, batch = stacked_inputs(config, fns, k)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), (params, opt, rest, batch))
    mlir = jax.export.export(step, platforms=["tpu"])(*abstract).mlir_module()
    ops = len(re.findall(r"^\s*(?:%\S+ = )?\"?(?:stablehlo|chlo|mhlo|sdy)\.", mlir, re.M))
    shapes = dot_shapes(mlir)
    return dict(mxu_occupancy=round(mxu_occupancy(shapes, mxu), 4), dots=len(shapes),
                ops_per_run=round(ops / k, 1), dot_batch=sorted({s[0] for s in shapes}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="cpu", help="a study preset: a packaged name or a file")
    p.add_argument("--runs", default="llama-d16l2,llama-d48", help="comma list of the preset's runs")
    p.add_argument("--k", default="1,2,4,8", help="runs per stacked program")
    p.add_argument("--steps", type=int, default=40, help="steps per timed burst (3 bursts)")
    p.add_argument("--core", type=int, default=0)
    p.add_argument("--tpu", default="v5e", help="the TPU generation whose MXU side the occupancy uses")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from step_loop import as_worker

    as_worker(a.core)
    from kernels_pallas import tpu
    from linscale_jax.study import presets
    from linscale_jax.study.scaling import plan

    mxu = tpu.by_name(a.tpu).mxu
    study = presets.preset(a.config)
    runs = {r.name: r for r in plan.build_plan(study, "/tmp")}
    ks = [int(x) for x in a.k.split(",")]
    load = [round(x, 2) for x in os.getloadavg()]
    if not a.json:
        print(f"one core ({a.core}), single-threaded XLA; load average {load}; MXU {mxu}x{mxu} "
              f"(TPU {a.tpu})")
        print("| run | k | CPU ms per step (k runs) | k x step alone ms | per-run speedup | MXU "
              "occupancy (TPU lowering) | ops per run |")
        print("|---|---|---|---|---|---|---|", flush=True)
    for name in a.runs.split(","):
        cfg = runs[name].config
        alone = None
        for k in ks:
            step, fns, _ = stacked_step(cfg, k)
            t = cpu_seconds_per_step(step, stacked_inputs(cfg, fns, k), a.steps)
            if k == 1:
                alone = t
            base = alone if alone is not None else float("nan")
            row = dict(run=name, k=k, cpu_ms=round(t * 1e3, 3), alone_ms=round(k * base * 1e3, 3),
                       per_run_speedup=round(k * base / t, 3), **tpu_lowering(cfg, k, mxu))
            if a.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"| {name} | {k} | {row['cpu_ms']:.2f} | {row['alone_ms']:.2f} | "
                      f"x{row['per_run_speedup']:.2f} | {row['mxu_occupancy']:.1%} | "
                      f"{row['ops_per_run']:.0f} |", flush=True)
    if not a.json:
        print(f"load average at the end: {[round(x, 2) for x in os.getloadavg()]}")


if __name__ == "__main__":
    main()
