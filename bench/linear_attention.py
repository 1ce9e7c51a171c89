"""Forward+backward time against sequence length: linear attention (reference, xla, pallas; every
decay kind) and causal softmax attention (plain XLA and jax.nn.dot_product_attention), with the same
batch, heads and head dim for all, measured side by side in one process: every case (every length
included) is compiled and warmed up, then all cases are timed round-robin, --repeats times, so a
change of machine load hits every length alike. Two tables: the median and the minimum over the
repeats (on a shared machine the minimum is the least-disturbed run, the steadier ratio).

    python bench/linear_attention.py --seq-lens 1024,2048,4096,8192
    python bench/linear_attention.py --seq-lens 256,512 --json     # one JSON object per line

Without --json: a table of seconds, the growth ratios t(m)/t(n) between consecutive lengths and from
the first to the last (linear growth -> m/n, softmax -> (m/n)^2) and
softmax/linear (> 1 past the crossover). On CPU the pallas kernels run in Pallas interpret mode:
those rows are NOT a speed figure (they time a Python-level simulator); --pallas-max-len skips them
for long sequences.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.parallel.host_memory)
    from linscale_jax.parallel import host_memory

    host_memory.use_huge_pages()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from kernels_pallas import DecayKind, linear_attention  # noqa: E402

DECAYS = tuple(k.value for k in DecayKind)  # none, head, data
LINEAR_IMPLS = ("reference", "xla", "pallas")
SOFTMAX_VARIANTS = {"softmax": "plain XLA", "softmax_dpa": "jax.nn.dot_product_attention"}


def make_inputs(batch, seq_len, heads, head_dim, decay, dtype, seed=0):
    """q, k, v [b, t, h, 128]; log_decay None | [h] | [b, t, h, k] (values like TNL / HGRN2)."""
    kq, kk, kv, kd = jax.random.split(jax.random.PRNGKey(seed), 4)
    shape = (batch, seq_len, heads, head_dim)
    q, k, v = (0.1 * jax.random.normal(x, shape, dtype) for x in (kq, kk, kv))
    make_decay = DecayKind(decay).pick(
        lambda: None,
        lambda: -jnp.exp2(-8.0 * jnp.arange(1, heads + 1) / heads),  # ALiBi slopes
        lambda: jax.nn.log_sigmoid(3.0 + jax.random.normal(kd, shape, jnp.float32)))
    return q, k, v, make_decay()


def linear_step(impl, chunk_size):
    """jit(grad) of sum(o) w.r.t. q, k, v (and the data-dependent log decay)."""
    def loss(q, k, v, d):
        o = linear_attention(q, k, v, log_decay=d, impl=impl, chunk_size=chunk_size)
        return jnp.sum(o.astype(jnp.float32))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def softmax_plain(q, k, v):
    """Causal softmax attention in plain XLA: [b, t, h, d] -> [b, t, h, d]."""
    t = q.shape[1]
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / math.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1).astype(v.dtype), v)


def softmax_step(variant):
    def attend(q, k, v):
        if variant == "softmax":
            return softmax_plain(q, k, v)
        return jax.nn.dot_product_attention(q, k, v, is_causal=True)

    def loss(q, k, v, d):
        del d
        return jnp.sum(attend(q, k, v).astype(jnp.float32))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def interleaved_times(steps, repeats, warmup):
    """steps: list of (fn, args). Compile and warm up each, then time them round-robin (so a change
    of machine load hits all alike); returns the list of seconds of each."""
    for fn, args in steps:
        for _ in range(1 + warmup):  # the first call compiles
            jax.block_until_ready(fn(*args))
    times = [[] for _ in steps]
    for _ in range(repeats):
        for (fn, args), ts in zip(steps, times):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            ts.append(time.perf_counter() - t0)
    return times


def cases(args):
    """(impl, decay, variant) in measurement order."""
    for impl in args.impls:
        if impl in LINEAR_IMPLS:
            for decay in args.decays:
                yield impl, decay, impl
        elif impl == "softmax":
            for variant in SOFTMAX_VARIANTS:
                yield "softmax", None, variant
        else:
            raise SystemExit(f"unknown impl {impl!r}; choose from {LINEAR_IMPLS + ('softmax',)}")


def run(args):
    backend = jax.default_backend()
    interpret = backend == "cpu"
    results = []
    todo, steps = [], []
    for seq_len in args.seq_lens:
        for impl, decay, variant in cases(args):
            if impl == "pallas" and args.pallas_max_len and seq_len > args.pallas_max_len:
                continue
            if impl == "reference" and args.reference_max_len and seq_len > args.reference_max_len:
                continue
            inputs = make_inputs(args.batch, seq_len, args.heads, args.head_dim, decay or "none",
                                 jnp.dtype(args.dtype))
            step = (softmax_step(variant) if impl == "softmax"
                    else linear_step(impl, args.chunk_size))
            todo.append((impl, decay, variant, seq_len))
            steps.append((step, inputs))
    print(f"  compiling and timing {len(steps)} cases, lengths {args.seq_lens}, round-robin...",
          file=sys.stderr, flush=True)
    for (impl, decay, variant, seq_len), ts in zip(todo, interleaved_times(steps, args.repeats,
                                                                           args.warmup)):
        sec = statistics.median(ts)
        row = {"impl": impl, "decay": decay, "seq_len": seq_len, "seconds": sec,
               "seconds_min": min(ts),
               "variant": SOFTMAX_VARIANTS.get(variant, variant), "backend": backend,
               "speed_figure": not (impl == "pallas" and interpret)}
        results.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"  [{backend}] {variant:12s} decay={decay or '-':5s} t={seq_len:6d} "
                  f"{sec * 1e3:10.2f} ms", file=sys.stderr, flush=True)
    return results


def table(results, seq_lens, stat="seconds"):
    """Seconds per row and length, growth ratios t(m)/t(n), and softmax/linear ratios; stat:
    "seconds" (median over the repeats) or "seconds_min"."""
    rows = {}
    for r in results:
        rows.setdefault((r["impl"], r["decay"], r["variant"]), {})[r["seq_len"]] = r[stat]
    lines = []
    head = f"{'impl':10s} {'decay':5s} " + " ".join(f"{n:>9d}" for n in seq_lens)
    pairs = list(zip(seq_lens[:-1], seq_lens[1:]))
    if len(seq_lens) > 2:
        pairs.append((seq_lens[0], seq_lens[-1]))
    ratio_head = " ".join(f"{f'{m}/{n}':>10s}" for n, m in pairs)
    title = "forward+backward seconds (" + ("minimum" if stat == "seconds_min" else "median") + ")"
    lines += [title + " " * max(0, len(head) - len(title))
              + "   t(m)/t(n)", head + "   " + ratio_head]
    fmt = lambda x: f"{x:9.4f}" if x is not None else f"{'-':>9s}"  # noqa: E731
    for (impl, decay, variant), by_len in rows.items():
        name = "softmax" if variant == "plain XLA" else ("softmax*" if impl == "softmax" else impl)
        ratios = " ".join(f"{by_len[m] / by_len[n]:10.2f}" if n in by_len and m in by_len
                          else f"{'-':>10s}" for n, m in pairs)
        lines.append(f"{name:10s} {decay or '-':5s} "
                     + " ".join(fmt(by_len.get(n)) for n in seq_lens) + "   " + ratios)
    soft = rows.get(("softmax", None, "plain XLA"), {})
    if soft:
        lines += ["", "softmax (plain XLA) / linear: > 1 where linear attention is faster", head]
        for (impl, decay, variant), by_len in rows.items():
            if impl == "softmax":
                continue
            lines.append(f"{impl:10s} {decay:5s} " + " ".join(
                f"{soft[n] / by_len[n]:9.2f}" if n in by_len and n in soft else f"{'-':>9s}"
                for n in seq_lens))
    lines.append("softmax* = jax.nn.dot_product_attention (is_causal=True).")
    if any(not r["speed_figure"] for r in results):
        lines.append("pallas rows on CPU: Pallas interpret mode, NOT a speed figure.")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    strs = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    p.add_argument("--seq-lens", type=ints, default=[1024, 2048, 4096, 8192])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--chunk-size", type=int, default=None,
                   help="chunk length (default: the backend's default for each impl, "
                        "kernels_pallas.default_chunk_size)")
    p.add_argument("--impls", type=strs, default=["reference", "xla", "pallas", "softmax"])
    p.add_argument("--decays", type=strs, default=list(DECAYS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--pallas-max-len", type=int, default=0,
                   help="skip pallas above this length (0: never; useful in CPU interpret mode)")
    p.add_argument("--reference-max-len", type=int, default=0,
                   help="skip the token-by-token reference above this length (0: never)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    args = p.parse_args(argv)
    bad = set(args.decays) - set(DECAYS)
    if bad:
        p.error(f"unknown decay(s) {sorted(bad)}; choose from {DECAYS}")
    return args


def main(argv=None):
    args = parse_args(argv)
    print(f"backend={jax.default_backend()} devices={jax.devices()} batch={args.batch} "
          f"heads={args.heads} head_dim={args.head_dim} dtype={args.dtype} "
          f"chunk={args.chunk_size or 'backend default'} repeats={args.repeats}", file=sys.stderr, flush=True)
    results = run(args)
    if not args.json:
        print(table(results, sorted(args.seq_lens)))
        print()
        print(table(results, sorted(args.seq_lens), "seconds_min"))


if __name__ == "__main__":
    main()
