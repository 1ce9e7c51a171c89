"""LLaMA's training attention (forward + backward) in cache-sized groups against one whole-batch
group, measured side by side in one run (interleaved repetitions, medians).

    python bench/llama_attention.py [--batch=8] [--seq=256] [--heads=32] [--head-dim=8] [--reps=10]

Prints one JSON object: groups (the per-backend default, `llama.attention_groups`), grouped_ms,
whole_ms, speedup (whole / grouped). Defaults: llama-d256's train step (batch 8 x 256, 32 heads of 8)
with packed documents.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.parallel.host_memory)
    from linscale_jax.parallel import host_memory

    host_memory.use_huge_pages()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from linscale_jax.models import llama  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--head-dim", type=int, default=8)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    shape = (a.batch, a.seq, a.heads, a.head_dim)
    q, k, v, w = (jax.random.normal(key, shape) for key in jax.random.split(jax.random.key(0), 4))
    seg = jnp.asarray(np.repeat(np.arange(4), -(-a.seq // 4))[None, :a.seq].repeat(a.batch, 0))
    groups = llama.attention_groups(a.batch, a.heads, a.seq)
    fns = {name: jax.jit(jax.value_and_grad(
        lambda q, k, v, g=g: jnp.sum(w * llama.causal_attention(q, k, v, seg, groups=g)), (0, 1, 2)))
        for name, g in (("grouped", groups), ("whole", (1, 1)))}
    times = {name: [] for name in fns}
    for f in fns.values():
        jax.block_until_ready(f(q, k, v))  # compile
    for _ in range(a.reps):
        for name, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(q, k, v))
            times[name].append(time.perf_counter() - t0)
    ms = {name: 1e3 * float(np.median(ts)) for name, ts in times.items()}
    print(json.dumps(dict(groups=list(groups), grouped_ms=round(ms["grouped"], 2),
                          whole_ms=round(ms["whole"], 2),
                          speedup=round(ms["whole"] / ms["grouped"], 3))))


if __name__ == "__main__":
    main()
