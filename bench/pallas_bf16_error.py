"""Error of the Pallas kernels with bf16 MXU operands against the float32 reference, every decay
kind with packed segments, values and gradients, in flash-linear-attention's metric
(RMS(x - ref) / RMS(ref), their tests' `get_err_ratio`).

    python bench/pallas_bf16_error.py [--t 256] [--heads 2] [--head-dim 128] [--chunk 128]
                                      [--inputs normal|fla] [--kinds none,head,data] [--json]

--inputs normal: q, k ~ N(0, 1/sqrt(k)), v ~ N(0, 1), data log decays log σ(2 + N(0, 1)), per-head
log decays -exp(-linspace(1, 8)); fla: the distribution of flash-linear-attention's
tests/ops/test_gla.py::test_chunk (q, k, v ~ U[0, 1) with q scaled by k^-1/2, log decays
log σ(U[0, 1)), initial state U[0, 1), cotangents N(0, 1)); the per-head decay takes log σ(U[0, 1))
per head. Both pack ~3 documents a row (segment_ids). q, k, v and the output cotangent are rounded
to bf16 once; the reference (token-by-token scan) runs
on those values in float32, the kernels in bf16 (default `matmul_dtype`) and, for comparison, with
matmul_dtype=float32. The kernels run in TPU interpret mode on CPU (slow: minutes at t = 256).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from kernels_pallas import linear_attention  # noqa: E402
from kernels_pallas.linear_attention.api import segment_starts  # noqa: E402
from kernels_pallas.linear_attention.config import LinearAttentionBlocks  # noqa: E402
from kernels_pallas.linear_attention.pallas import linear_attention_pallas  # noqa: E402

NAMES = ("o", "final_state", "dq", "dk", "dv", "dlog_decay", "dinitial_state")


def err_ratio(x, ref) -> float:
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return float(np.sqrt(np.mean((x - ref) ** 2)) / (np.sqrt(np.mean(ref ** 2)) + 1e-8))


def measure(kind, b, t, h, e, chunk, inputs="normal", seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 8)
    bf = lambda x: x.astype(jnp.bfloat16)  # noqa: E731
    if inputs == "fla":
        u = lambda key, shape: jax.random.uniform(key, shape)  # noqa: E731
        q, k, v = bf(u(ks[0], (b, t, h, e)) / e ** 0.5), bf(u(ks[1], (b, t, h, e))), bf(u(ks[2], (b, t, h, e)))
        decay = {"none": None, "head": jax.nn.log_sigmoid(u(ks[3], (h,))),
                 "data": jax.nn.log_sigmoid(u(ks[3], (b, t, h, e)))}[kind]
        s0 = u(ks[4], (b, h, e, e))
    else:
        q, k = (bf(jax.random.normal(x, (b, t, h, e)) / e ** 0.25) for x in ks[:2])
        v = bf(jax.random.normal(ks[2], (b, t, h, e)))
        decay = {"none": None, "head": -jnp.exp(-jnp.linspace(1.0, 8.0, h)),
                 "data": jax.nn.log_sigmoid(2.0 + jax.random.normal(ks[3], (b, t, h, e)))}[kind]
        s0 = jax.random.normal(ks[4], (b, h, e, e))
    do, ds = bf(jax.random.normal(ks[5], (b, t, h, e))), jax.random.normal(ks[6], (b, h, e, e))
    rng = np.random.default_rng(seed)
    ids = np.cumsum(rng.random((b, t)) < 3.0 / t, axis=1)  # ~3 documents a row
    starts = segment_starts(jnp.asarray(ids))
    blocks = LinearAttentionBlocks(chunk_size=chunk, sub_chunk=16)

    def run(fn, dtype):
        cast = lambda x: x.astype(dtype)  # noqa: E731
        out, vjp = jax.vjp(fn, cast(q), cast(k), cast(v), decay, s0)
        return out, vjp((cast(do), ds))

    ref = jax.jit(lambda: run(lambda *a: linear_attention(
        *a[:3], log_decay=a[3], initial_state=a[4], segment_ids=jnp.asarray(ids),
        return_final_state=True, impl="reference"), jnp.float32))()
    ref = jax.tree.map(np.asarray, ref)
    rows = {}
    for label, mdt in (("bf16", None), ("f32", jnp.float32)):
        got = jax.jit(lambda: run(lambda *a: linear_attention_pallas(
            *a, starts, blocks=blocks, matmul_dtype=mdt), jnp.bfloat16))()
        (o, s), grads = jax.tree.map(np.asarray, got)
        (o_r, s_r), grads_r = ref
        vals = [o, s, *grads]
        refs = [o_r, s_r, *grads_r]
        rows[label] = {n: err_ratio(x, y) for n, x, y in zip(NAMES, vals, refs) if y is not None}
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--t", type=int, default=256)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--chunk", type=int, default=128)
    p.add_argument("--inputs", choices=("normal", "fla"), default="normal")
    p.add_argument("--kinds", default="none,head,data")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    out = {}
    for kind in a.kinds.split(","):
        t0 = time.time()
        out[kind] = measure(kind, a.batch, a.t, a.heads, a.head_dim, a.chunk, a.inputs)
        print(f"[{kind}: {time.time() - t0:.0f} s]", file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"b={a.batch} t={a.t} h={a.heads} k=v={a.head_dim} chunk={a.chunk}, {a.inputs} inputs, "
          "segments; error ratio RMS(x - ref) / RMS(ref)")
    print(f"{'kind':<6}{'operands':<10}" + "".join(f"{n:>15}" for n in NAMES))
    for kind, rows in out.items():
        for label, r in rows.items():
            print(f"{kind:<6}{label:<10}" + "".join(
                f"{r[n]:>15.2e}" if n in r else f"{'-':>15}" for n in NAMES))


if __name__ == "__main__":
    main()
