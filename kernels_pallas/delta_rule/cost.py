"""Cost of each Pallas delta-rule kernel, from the shapes: what every pallas_call passes to XLA as
its pl.CostEstimate, and what the roofline reads.

    kernel_flops(st, kernel, b, t)             matmul FLOPs (2 per multiply-add, every MXU pass)
    kernel_transcendentals(st, kernel, b, t)   exp evaluations
    estimate(st, kernel, b, t, args, outs)     pl.CostEstimate (bytes: every operand and output once)

kernel: "forward" | "states" | "reverse" (pallas_fwd, pallas_bwd); st: pallas_chunk.Static; b batch,
t padded sequence. A split matmul (pallas_chunk.mm(..., split=True)) with bf16 operands costs one
pass plus one per float32 operand (its low part); with matmul_dtype float32 one pass at HIGHEST.
Elementwise VPU work is not in `flops`. The formulas per grid step: docs/models.md, "The delta
rule".
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax.experimental import pallas as pl

from kernels_pallas.linear_attention.cost import cost_estimate

KERNELS = ("forward", "states", "reverse")


def _passes(st, *f32):
    """MXU passes of a split matmul whose operands are float32 (True) or in the MXU dtype."""
    return 1 if st.dt == jnp.float32 else 1 + sum(bool(x) for x in f32)


def per_step_flops(st, kernel: str) -> int:
    """Matmul FLOPs of one grid step (one chunk of one head)."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {KERNELS}.")
    c, k, v = st.chunk, st.key_dim, st.value_dim
    levels = int(math.log2(c))
    f32_in = jnp.dtype(st.in_dtype) == jnp.float32  # q, k, v, do: split when float32
    scaled_rows = st.gated or st.segments  # q ⊙ e_start, k ⊙ e_end are float32 products
    ff = _passes(st, True, True)
    # the pairs' log-decay range sums, K Kᵀ and Q Kᵀ (none in the state sweep: it reads T)
    flops = 0 if kernel == "states" else (2 * c ** 3 if st.gated else 0) + 2 * 2 * c * c * k
    # the UT transform: the inverse (forward only: the backward reads the forward's T),
    # U = T βV, Wk = T (β e_start K); then W = U − Wk S
    flops += levels * 2 * 2 * c ** 3 * ff if kernel == "forward" else 0
    flops += 2 * c * c * (k + v) * ff + 2 * c * k * v * ff
    if kernel == "forward":  # o = (e_start Q) S + (QKᵀ ⊙ Γ) W
        flops += 2 * c * k * v + 2 * c * c * v
    if kernel in ("forward", "states"):  # S' = dec S + (e_end K)ᵀ W
        return flops + 2 * c * k * v * _passes(st, scaled_rows or f32_in, True)
    flops += 2 * c * c * v + 2 * c * k * v * _passes(st, scaled_rows or f32_in, True)  # dW
    flops += 2 * c * k * v * (_passes(st, scaled_rows or f32_in, f32_in) + ff)  # dS_start
    flops += 2 * c * c * v  # dA = dO Wᵀ
    flops += 2 * c * k * v * (_passes(st, f32_in, True) + 2 * ff)  # dQ_in, dK_out, dWk
    flops += 2 * c * c * (k + v) * 2 * ff  # dT; dVb, dKb
    flops += 2 * 2 * c ** 3 * ff  # dL = −Tᵀ dT Tᵀ
    flops += 4 * 2 * c * c * k * _passes(st, True, f32_in)  # dQ, dK from Q Kᵀ and K Kᵀ
    return flops + (2 * c ** 3 if st.gated else 0)  # dg through the pair range sums


def kernel_flops(st, kernel: str, b: int, t: int) -> int:
    """Matmul FLOPs of one kernel call over the padded length t."""
    return per_step_flops(st, kernel) * b * st.num_heads * (t // st.chunk)


def kernel_transcendentals(st, kernel: str, b: int, t: int) -> int:
    """exp evaluations of one kernel call: the gate's C² pair factors (not in the state sweep),
    2C row factors and the chunk decay, once per grid step (none without the gate)."""
    c = st.chunk
    per = (c * c * (kernel != "states") + 2 * c + 1) if st.gated else 0
    return per * b * st.num_heads * (t // c)


def estimate(st, kernel: str, b: int, t: int, args, outs) -> pl.CostEstimate:
    """args: the kernel's operands (arrays or ShapeDtypeStructs); outs: (shape, dtype) pairs."""
    return cost_estimate(kernel_flops(st, kernel, b, t), kernel_transcendentals(st, kernel, b, t),
                         args, outs)
