"""The short convolution (linear_common.short_conv: the lagged taps as one `lax.scan`) against the
same convolution with its taps written out one by one (a program K - 1 taps long), forward +
backward, side by side in one run (interleaved repetitions, medians), with packed documents.

    python bench/short_conv.py [--batch=16] [--seq=256] [--width=64] [--taps=4,64] [--reps=20]

Prints one JSON object per width K: scan_ms, unrolled_ms, speedup (unrolled / scan), and each
lowered program's size (HLO characters: the scan's does not grow with K). Defaults: the recall
preset's d64 front (q, k, v of 64 channels each) on 16 x 256 tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from linscale_jax.models.linear_common import short_conv  # noqa: E402


def unrolled(z, kernel, positions):
    """short_conv's value with one traced operation per tap (no history)."""
    width, t = kernel.shape[0], z.shape[1]
    full = jnp.pad(z, ((0, 0), (width - 1, 0)) + ((0, 0),) * (z.ndim - 2))
    y = z * kernel[width - 1]
    for j in range(width - 1):
        inside = (positions >= width - 1 - j).astype(z.dtype).reshape(positions.shape + (1,) * (z.ndim - 2))
        y = y + full[:, j:j + t] * kernel[j] * inside
    return y


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--taps", default="4,64")
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    key = jax.random.key(0)
    z = jax.random.normal(key, (a.batch, a.seq, 3, a.width))
    pos = jnp.asarray(np.tile(np.arange(a.seq) % (a.seq // 4), (a.batch, 1)))  # 4 documents a row
    forms = {"scan": lambda z, w: short_conv(z, w, pos)[0], "unrolled": lambda z, w: unrolled(z, w, pos)}
    for taps in (int(x) for x in a.taps.split(",")):
        w = jax.random.normal(jax.random.fold_in(key, taps), (taps, 3, a.width))
        fns = {name: jax.jit(jax.value_and_grad(lambda z, w, f=f: jnp.sum(jnp.sin(f(z, w))), (0, 1)))
               for name, f in forms.items()}
        sizes = {name: len(f.lower(z, w).as_text()) for name, f in fns.items()}
        times = {name: [] for name in fns}
        for f in fns.values():
            jax.block_until_ready(f(z, w))  # compile
        for _ in range(a.reps):
            for name, f in fns.items():
                t0 = time.perf_counter()
                jax.block_until_ready(f(z, w))
                times[name].append(time.perf_counter() - t0)
        ms = {name: 1e3 * float(np.median(ts)) for name, ts in times.items()}
        print(json.dumps(dict(taps=taps, scan_ms=round(ms["scan"], 3), unrolled_ms=round(ms["unrolled"], 3),
                              speedup=round(ms["unrolled"] / ms["scan"], 3),
                              hlo_chars_scan=sizes["scan"], hlo_chars_unrolled=sizes["unrolled"])),
              flush=True)


if __name__ == "__main__":
    main()
