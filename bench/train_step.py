"""Train-step throughput and MFU per architecture at tiny ladder sizes, on the machine it runs on.

    python bench/train_step.py [--sizes=d64,d96] [--archs=llama,tnl,hgrn2,cosformer2]
                               [--batch=8] [--seq=256] [--steps=3] [--json] [--clock=wall|cpu]

--json prints one JSON object per (arch, size): arch, size, mfu (a fraction), step_ms, compile_s,
tokens_per_sec, page_faults_per_step (minor faults, see linscale_jax.parallel.host_memory), peak_gflops
(instead of the markdown table); the peak is the best of the
measurements at the start and after every row so far (a shared machine's load moves it).

MFU = accounting.flops_per_token_exact * tokens/s / peak, where peak is the FLOP/s of a large jitted
float32 matmul measured in the same run (so ratios between rows and against the peak are comparable).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.parallel.host_memory)
    from linscale_jax.parallel import cpu_codegen, host_memory

    cpu_codegen.use_xla_fusions()  # the trainer's XLA:CPU fusions
    host_memory.use_huge_pages()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from linscale_jax.models import accounting  # noqa: E402
from linscale_jax.train import metrics
from linscale_jax.parallel import sharding
from linscale_jax.train import loop as trainer
from linscale_jax.config import ARCHS, base_config  # noqa: E402
from linscale_jax.models import ModelConfig, sizes  # noqa: E402


def bench_one(arch, size, batch, seq, steps, clock=time.perf_counter):
    c = base_config()
    sizes.apply_model(c.model, sizes.ladder_model(arch, size))
    c.train.update(steps=1000, batch_size=batch, seq_len=seq)
    mesh = sharding.make_mesh(c.mesh, jax.devices()[:1])
    fns = trainer.compiled(c, mesh)
    params, rest = fns.init_params(), fns.rest()
    opt = fns.init_opt(params)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 256, (batch, seq + 1), dtype=np.int32)
    b = dict(inputs=tokens[:, :-1], targets=tokens[:, 1:], segment_ids=np.ones((batch, seq), np.int32),
             weights=np.ones((batch, seq), np.float32))
    b = {k: jax.device_put(v, fns.b_shard) for k, v in b.items()}
    t0 = time.perf_counter()
    params, opt, m = fns.step_fn(params, opt, rest, b)
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - t0
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        t = clock()
        params, opt, m = fns.step_fn(params, opt, rest, b)
        jax.block_until_ready(m)
        times.append(clock() - t)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps
    step_s = float(np.median(times))
    cfg = ModelConfig.from_config(c.model)
    tps = batch * seq / step_s
    return dict(arch=arch, size=size, n_params=accounting.param_counts(cfg)["non_embedding"],
                compile_s=compile_s, step_ms=1e3 * step_s, tokens_per_sec=tps, page_faults=faults,
                flops_per_token=accounting.flops_per_token_exact(cfg, seq),
                achieved=accounting.flops_per_token_exact(cfg, seq) * tps)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", default=",".join(ARCHS))
    p.add_argument("--sizes", default="d64,d96")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="step time: wall, or this process's CPU time (time.process_time; with "
                        "XLA_FLAGS=--xla_cpu_multi_thread_eigen=false, what one study worker spends, "
                        "and less moved by other jobs on a shared machine)")
    a = p.parse_args()
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    peak = metrics.measure_matmul_peak(n=2048, reps=5)
    if a.json:
        for size in a.sizes.split(","):
            for arch in a.archs.split(","):
                r = bench_one(arch, size, a.batch, a.seq, a.steps, clock)
                # the peak of a shared machine moves with its load: the best of the measurements
                # before and after every row (a low peak would inflate the MFU)
                peak = max(peak, metrics.measure_matmul_peak(n=2048, reps=5))
                print(json.dumps(dict(arch=arch, size=size, mfu=round(r["achieved"] / peak, 4),
                                      step_ms=round(r["step_ms"], 2),
                                      compile_s=round(r["compile_s"], 2),
                                      tokens_per_sec=round(r["tokens_per_sec"], 1),
                                      page_faults_per_step=round(r["page_faults"]),
                                      peak_gflops=round(peak / 1e9, 2))), flush=True)
        return
    print(f"device: {jax.devices()[0].device_kind}; measured f32 matmul peak (2048^3): "
          f"{peak / 1e9:.1f} GFLOP/s; batch {a.batch} x seq {a.seq}, median of {a.steps} steps",
          flush=True)
    print(f"| arch | size | non-emb params | compile s | step ms | tokens/s | GFLOP/s | MFU |")
    print("|---|---|---|---|---|---|---|---|")
    for size in a.sizes.split(","):
        for arch in a.archs.split(","):
            r = bench_one(arch, size, a.batch, a.seq, a.steps, clock)
            print(f"| {arch} | {size} | {r['n_params']:,} | {r['compile_s']:.1f} | "
                  f"{r['step_ms']:.1f} | {r['tokens_per_sec']:,.0f} | {r['achieved'] / 1e9:.2f} | "
                  f"{r['achieved'] / peak:.1%} |", flush=True)


if __name__ == "__main__":
    main()
