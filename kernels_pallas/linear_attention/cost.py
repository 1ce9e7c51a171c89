"""Cost of each Pallas linear-attention kernel, from the shapes: what every pallas_call passes to XLA
as its pl.CostEstimate, and what the roofline reads.

    kernel_flops(st, kernel, b, t)             matmul FLOPs (2 per multiply-add)
    kernel_transcendentals(st, kernel, b, t)   exp evaluations
    estimate(st, kernel, b, t, args, outs)     pl.CostEstimate (bytes: every operand and output once)

kernel: "forward" | "intra" | "dq" | "reverse" (pallas_fwd, pallas_bwd); st: pallas_chunk.Static;
b batch, t padded sequence. Elementwise VPU work is not in `flops`, as in linscale_jax's accounting.
The formulas per grid step: docs/models.md, "Kernel cost".
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax.experimental import pallas as pl

from kernels_pallas.linear_attention.kind import DecayKind

KERNELS = ("forward", "intra", "dq", "reverse")


def _steps(st, b: int, t: int) -> int:
    return b * st.num_heads * (t // st.chunk)


def _parts(st):
    c, s, k, v = st.chunk, st.sub, st.key_dim, st.value_dim
    m = c // s
    return c, s, k, v, m, s * m * (m - 1) // 2


def kernel_flops(st, kernel: str, b: int, t: int) -> int:
    """Matmul FLOPs of one kernel call over the padded length t."""
    c, s, k, v, m, p = _parts(st)
    data = st.kind == DecayKind.DATA
    per = 4 * c * c * k if data and kernel != "intra" else 0  # the decay factors' range sums
    if kernel == "forward":
        per += 4 * c * k * v
        per += (4 * c * c * k + 2 * m * s**3 * k + 2 * m * s * s * v + 2 * s * p * (k + v)) if data \
            else 2 * c * c * (k + v)
    elif kernel == "intra":
        per += (4 * c * c * k + 2 * m * s**3 * k + 4 * m * s * s * v + 2 * s * p * (3 * k + 2 * v)) \
            if data else 2 * c * c * (3 * k + 2 * v)
    elif kernel == "dq":
        per += 4 * c * k * v
    elif kernel == "reverse":
        per += 6 * c * k * v
    else:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {KERNELS}.")
    if st.dt != jnp.float32:  # low parts of the split matmuls
        decayed = st.kind != DecayKind.NONE
        if kernel == "intra":
            per += 8 * s * p * k if data else 4 * c * c * k
        else:
            per += 2 * c * k * v * (decayed + (kernel != "forward"))
    return per * _steps(st, b, t)


def kernel_transcendentals(st, kernel: str, b: int, t: int) -> int:
    """exp evaluations of one kernel call."""
    c, s, k, v, m, p = _parts(st)
    if st.kind == DecayKind.NONE:
        return 0
    if st.kind == DecayKind.HEAD:
        pairs = c * c if kernel in ("forward", "intra") else 0
        return (pairs + (0 if kernel == "intra" else 2 * c + 1)) * _steps(st, b, t)
    per = 0 if kernel == "intra" else 2 * c * k + k
    if kernel in ("forward", "intra"):
        per += m * s * s * k + (m - 1) * s * k + s * k * m * (m - 1) // 2
    return per * _steps(st, b, t)


def _nbytes(x) -> int:
    shape, dtype = (x.shape, x.dtype) if hasattr(x, "shape") else x
    return math.prod(shape) * jnp.dtype(dtype).itemsize


def estimate(st, kernel: str, b: int, t: int, args, outs) -> pl.CostEstimate:
    """args: the kernel's operands (arrays or ShapeDtypeStructs); outs: (shape, dtype) pairs."""
    return cost_estimate(kernel_flops(st, kernel, b, t), kernel_transcendentals(st, kernel, b, t),
                         args, outs)


def cost_estimate(flops, transcendentals, args, outs) -> pl.CostEstimate:
    """pl.CostEstimate with bytes_accessed = every operand (array or ShapeDtypeStruct) and output
    ((shape, dtype) pair) once."""
    return pl.CostEstimate(
        flops=int(flops), transcendentals=int(transcendentals),
        bytes_accessed=int(sum(_nbytes(x) for x in args) + sum(_nbytes(x) for x in outs)),
    )
