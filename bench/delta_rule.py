"""Forward+backward time of the delta rule's three forms (reference, xla, pallas), gated (Gated
DeltaNet) and ungated (DeltaNet), beside chunked linear attention (xla, no decay) on the same
shapes, measured side by side in one process: every case (every length included) is compiled and
warmed up, then all are timed round-robin, --repeats times, so a change of machine load hits every
case alike. Two tables, median and minimum over the repeats (on a shared machine the minimum is the
least-disturbed run), with the ratios reference / xla and delta rule / linear attention.

    python bench/delta_rule.py --seq-lens 256,1024 --head-dim 16 --batch 8
    python bench/delta_rule.py --seq-lens 512 --chunk-sizes 16,32,64     # the xla chunk sweep
    python bench/delta_rule.py --seq-lens 256 --json                     # one JSON object per line

On CPU the pallas kernels run in Pallas interpret mode: those rows are NOT a speed figure (they
time a Python-level simulator); --pallas-max-len skips them for long sequences.
Legend: b batch, t sequence, h heads, k = v head dim.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.parallel.host_memory)
    from linscale_jax.parallel import host_memory

    host_memory.use_huge_pages()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench.linear_attention import interleaved_times  # noqa: E402
from kernels_pallas import delta_rule, linear_attention  # noqa: E402

IMPLS = ("reference", "xla", "pallas", "linear")  # linear: linear_attention(impl="xla")


def make_inputs(b, t, h, e, dtype, seed=0):
    """q ~ N(0, 1/e), k L2-normalised, v ~ N(0, 1) [b, t, h, e]; beta U(0, 1), log decay
    log σ(3 + N(0, 1)) [b, t, h] (the gate of a trained model keeps most of the state)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, t, h, e)) / np.sqrt(e)
    k = rng.standard_normal((b, t, h, e))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((b, t, h, e))
    beta = rng.uniform(size=(b, t, h))
    g = -np.logaddexp(0.0, -(3.0 + rng.standard_normal((b, t, h))))
    cast = lambda x, d=dtype: jnp.asarray(x, d)  # noqa: E731
    return cast(q), cast(k), cast(v), cast(beta, jnp.float32), cast(g, jnp.float32)


def grad_step(impl, gated, chunk_size):
    """jit(grad) of sum(o) w.r.t. q, k, v, beta (and the log decay when gated)."""
    def loss(q, k, v, beta, g):
        if impl == "linear":
            o = linear_attention(q, k, v, impl="xla", chunk_size=chunk_size)
        else:
            o = delta_rule(q, k, v, beta, log_decay=g if gated else None, impl=impl,
                           chunk_size=chunk_size)
        return jnp.sum(o.astype(jnp.float32))

    argnums = (0, 1, 2) if impl == "linear" else ((0, 1, 2, 3, 4) if gated else (0, 1, 2, 3))
    return jax.jit(jax.grad(loss, argnums=argnums))


def cases(args):
    """(impl, gated, chunk) in measurement order, per length."""
    for impl in args.impls:
        if impl not in IMPLS:
            raise SystemExit(f"unknown impl {impl!r}; choose from {IMPLS}")
        chunks = args.chunk_sizes if impl in ("xla", "pallas", "linear") else [None]
        for gated in ((False,) if impl == "linear" else args.gates):
            for chunk in chunks:
                yield impl, gated, chunk


def run(args):
    backend = jax.default_backend()
    todo, steps = [], []
    for t in args.seq_lens:
        for impl, gated, chunk in cases(args):
            if impl == "pallas" and args.pallas_max_len and t > args.pallas_max_len:
                continue
            if impl == "reference" and args.reference_max_len and t > args.reference_max_len:
                continue
            todo.append((impl, gated, chunk, t))
            steps.append((grad_step(impl, gated, chunk),
                          make_inputs(args.batch, t, args.heads, args.head_dim,
                                      jnp.dtype(args.dtype))))
    print(f"  compiling and timing {len(steps)} cases round-robin...", file=sys.stderr, flush=True)
    results = []
    for (impl, gated, chunk, t), ts in zip(todo, interleaved_times(steps, args.repeats,
                                                                    args.warmup)):
        row = {"impl": impl, "gated": gated, "chunk": chunk, "seq_len": t, "backend": backend,
               "seconds": statistics.median(ts), "seconds_min": min(ts),
               "speed_figure": not (impl == "pallas" and backend == "cpu")}
        results.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
    return results


def table(results, seq_lens, stat="seconds"):
    """Seconds per case and length; reference / xla; delta rule (xla) / linear attention (xla,
    same chunk). stat: "seconds" (median over the repeats) or "seconds_min"."""
    rows = {}
    for r in results:
        rows.setdefault((r["impl"], r["gated"], r["chunk"]), {})[r["seq_len"]] = r[stat]
    head = f"{'impl':10s} {'gate':5s} {'chunk':>7s} " + " ".join(f"{n:>9d}" for n in seq_lens)

    def line(impl, gated, chunk, values):
        gate = "-" if impl == "linear" else ("g" if gated else "no")
        return f"{impl:10s} {gate:5s} {str(chunk or 'default'):>7s} " + " ".join(
            f"{x:9.4f}" if x is not None else f"{'-':>9s}" for x in values)

    lines = [f"forward+backward seconds ({'minimum' if stat == 'seconds_min' else 'median'})", head]
    lines += [line(*key, [by_len.get(n) for n in seq_lens]) for key, by_len in rows.items()]
    for title, other, invert in (
            ("reference / xla: > 1 where the chunked form is faster",
             lambda gated, chunk: rows.get(("reference", gated, None)), True),
            ("delta rule / linear attention (both xla, same chunk): the delta rule's cost factor",
             lambda gated, chunk: rows.get(("linear", False, chunk)), False)):
        out = []
        for (impl, gated, chunk), by_len in rows.items():
            den = other(gated, chunk)
            if impl != "xla" or not den:
                continue
            out.append(line(impl, gated, chunk, [
                None if n not in by_len or n not in den else
                (den[n] / by_len[n] if invert else by_len[n] / den[n]) for n in seq_lens]))
        if out:
            lines += ["", title, head] + out
    if any(not r["speed_figure"] for r in results):
        lines.append("pallas rows on CPU: Pallas interpret mode, NOT a speed figure.")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    strs = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    p.add_argument("--seq-lens", type=ints, default=[256, 1024])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--chunk-sizes", type=lambda s: [None if x == "default" else int(x)
                                                    for x in s.split(",")], default=[None],
                   help="chunk lengths of xla / pallas / linear ('default': the backend's)")
    p.add_argument("--impls", type=strs, default=["reference", "xla", "pallas", "linear"])
    p.add_argument("--gates", type=lambda s: [x == "gated" for x in s.split(",")],
                   default=[True, False], help="gated,ungated (default both)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--pallas-max-len", type=int, default=256,
                   help="skip pallas above this length (0: never; CPU interpret mode is slow)")
    p.add_argument("--reference-max-len", type=int, default=0,
                   help="skip the token-by-token reference above this length (0: never)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    print(f"backend={jax.default_backend()} batch={args.batch} heads={args.heads} "
          f"head_dim={args.head_dim} dtype={args.dtype} repeats={args.repeats}",
          file=sys.stderr, flush=True)
    results = run(args)
    if not args.json:
        print(table(results, sorted(args.seq_lens)))
        print()
        print(table(results, sorted(args.seq_lens), "seconds_min"))


if __name__ == "__main__":
    main()
