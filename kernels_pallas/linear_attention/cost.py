"""Cost of each Pallas linear-attention kernel, from the shapes: what every pallas_call passes to XLA
as its pl.CostEstimate, and what the roofline reads.

    kernel_flops(st, kernel, b, t)             matmul FLOPs (2 per multiply-add)
    kernel_transcendentals(st, kernel, b, t)   exp evaluations
    estimate(st, kernel, b, t, args, outs)     pl.CostEstimate (bytes: every operand and output once)

kernel: "forward" | "intra" | "dq" | "reverse" (pallas_fwd, pallas_bwd). Legend: b batch, t padded
sequence, h heads, K key dim, V value dim, C chunk, s sub-chunk, m = C / s sub-chunks per chunk,
P = s·m(m-1)/2 (the earlier rows summed over the sub-chunks). Per (batch, head, chunk) grid step:

    decay factors   data: range sums 2·2C²K, exp 2CK + K     head: exp C² + 2C + 1     none: 0
                    (intra reads only the pair decays: head exp C², data none of these;
                     dq and reverse only the row / state factors: head exp 2C + 1)
    forward         o_inter and state update 2·2CKV, plus
                        none/head: QKᵀ and PV 2C²(K + V)
                        data: sub-chunk range sums 4C²K, diagonal exponents 2ms³K (exp ms²K),
                              diagonal PV 2ms²V, earlier sub-chunks 2sP(K + V) (exp (m-1)sK + sKm(m-1)/2)
    intra           none/head: 2C²(3K + 2V)
                    data: 4C²K + 2ms³K + 4ms²V + 2sP(3K + 2V) (exps as forward)
    dq              4CKV          reverse   6CKV
  plus the low-part passes of the split matmuls (pallas_chunk.mm_split, bf16 operands only): a
  decayed operand of a state update 2CKV (forward, dq, reverse; head/data), the state read of dq
  and reverse 2CKV, intra dq and dk 4C²K (none/head) or 8sPK (data: both operands split).

Each block is read from / written to HBM once (the state blocks once per batch row and head), so
bytes_accessed is the size of every operand plus every output. Elementwise VPU work (decay scaling,
the data decay's [s, s, K] diagonal products) is not in `flops`, as in linscale_jax's accounting.
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
    return pl.CostEstimate(
        flops=int(kernel_flops(st, kernel, b, t)),
        transcendentals=int(kernel_transcendentals(st, kernel, b, t)),
        bytes_accessed=int(sum(_nbytes(x) for x in args) + sum(_nbytes(x) for x in outs)),
    )
