"""impl="pallas": the chunked delta rule as Pallas TPU (Mosaic) kernels, with a custom VJP.

    delta_rule_pallas(q, k, v, beta, log_decay=None, initial_state=None, starts=None, *,
                      chunk_size=None, blocks=None, matmul_dtype=None, interpret=None)
        -> (o [b, t, h, v] in q.dtype, final_state [b, h, k, v] float32)

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim): q, k [b, t, h, k] and v
[b, t, h, v] in float32 or bfloat16; beta, log_decay (None: no gate) [b, t, h]; initial_state
[b, h, k, v]; starts None | [b, t] bool segment starts (linear_attention.api.segment_starts).

Forward: pallas_fwd.forward (one sweep, the state in VMEM scratch); under differentiation it also
keeps every chunk's T = (I + L)^{-1} ([b, h, t, C] float32: C floats a token and head, against
k + v of the inputs) for the backward, so the UT inverse runs once. Backward: pallas_fwd.states
recomputes the chunk-start states (one sweep), pallas_bwd.backward runs the reverse sweep and
returns every gradient (q, k, v, beta, log_decay, initial_state). `matmul_dtype` (default the
input dtype): bfloat16 feeds the MXU bf16 operands with f32 accumulation (the recurrence's
float32 products as hi + lo pairs, pallas_chunk); jnp.float32 multiplies everything in float32 at
HIGHEST (the reference path). `blocks` (chunk, grid order, VMEM limit) default to the TPU
generation's row (config.TPU_BLOCKS); chunk_size overrides the chunk (rounded down to a power of
two, at most the 16-rounded sequence). Every pallas_call carries a pl.CostEstimate (cost.py).

Backends: TPU compiles with Mosaic; CPU runs the same kernels in TPU interpret mode (out-of-bounds
reads raise, scratch starts as NaN), so tests execute the real kernel code; GPU is refused with a
clear error (use impl='xla').
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from kernels_pallas.delta_rule import pallas_bwd, pallas_fwd
from kernels_pallas.delta_rule.checks import validate_inputs
from kernels_pallas.delta_rule.config import check_tiling, check_vmem, default_blocks
from kernels_pallas.delta_rule.pallas_chunk import Static
from kernels_pallas.linear_attention.pallas import default_interpret
from kernels_pallas.linear_attention.pallas_chunk import F32

_DTYPES = (jnp.float32, jnp.bfloat16)


def _chunk_for(t: int, chunk: int) -> int:
    """The chunk for a sequence of t tokens: `chunk` rounded down to a power of two, never longer
    than t rounded up to a power of two (and at least 16: TPU sublane tiling)."""
    chunk = 1 << (max(1, int(chunk)).bit_length() - 1)
    return max(16, min(chunk, 1 << max(0, (t - 1).bit_length())))


def delta_rule_pallas(q, k, v, beta, log_decay=None, initial_state=None, starts=None, *,
                      chunk_size=None, blocks=None, matmul_dtype=None, interpret=None):
    """See the module docstring. interpret: None (TPU: compile; CPU: TPU interpret mode), False
    (Mosaic lowering, e.g. to export for TPU from a CPU host) or pltpu.InterpretParams."""
    validate_inputs(q, k, v, beta, log_decay, initial_state)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype not in _DTYPES:
            raise ValueError(f"delta_rule_pallas: {name} has dtype {x.dtype}; use float32 or "
                             "bfloat16.")
    backend = jax.default_backend()
    if interpret is None:
        interpret = default_interpret(backend)
    mosaic = interpret is False
    blocks = blocks or default_blocks("tpu" if mosaic else backend)
    mxu = jnp.dtype(q.dtype if matmul_dtype is None else matmul_dtype)
    if mxu not in _DTYPES:
        raise ValueError(f"delta_rule_pallas: matmul_dtype={mxu.name}; use float32 or bfloat16.")
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    chunk = _chunk_for(t, chunk_size or blocks.chunk_size)
    check_tiling(chunk, dk, dv, h, q.dtype, "tpu" if mosaic else backend)
    gated = log_decay is not None
    check_vmem(blocks, dk, dv, q.dtype.itemsize, gated, starts is not None)
    st = Static(chunk=chunk, num_heads=h, key_dim=dk, value_dim=dv, gated=gated,
                segments=starts is not None, interpret=interpret, mxu=mxu.name,
                in_dtype=jnp.dtype(q.dtype).name, grid_order=blocks.grid_order,
                vmem_limit_bytes=blocks.vmem_limit_bytes if mosaic else None)
    tp = -(-t // chunk) * chunk
    seg = None
    if starts is not None:  # starts counted from each chunk start, [b, tp, 1] float32
        padded = jnp.pad(starts, ((0, 0), (0, tp - t))).reshape(b, tp // chunk, chunk)
        seg = jnp.cumsum(padded.astype(jnp.int32), axis=-1).astype(F32).reshape(b, tp, 1)

    def tokens(x):  # [b, t, h, w] -> [b, tp, h*w], zero padded
        return jnp.pad(x, ((0, 0), (0, tp - t), (0, 0), (0, 0))).reshape(b, tp, -1)

    def column(x):  # [b, t, h] -> [b, h, tp, 1] float32, zero padded (β = 0 writes nothing,
        # g = 0 keeps the state)
        return jnp.pad(jnp.swapaxes(x.astype(F32), 1, 2), ((0, 0), (0, 0), (0, tp - t)))[..., None]

    s0 = jnp.zeros((b, h, dk, dv), F32) if initial_state is None else initial_state.astype(F32)
    g = column(log_decay) if gated else None
    o, s_final = _core(st, tokens(q), tokens(k), tokens(v), column(beta), g, s0, seg)
    return o.reshape(b, tp, h, dv)[:, :t], s_final


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(st, q, k, v, beta, g, s0, seg):
    return pallas_fwd.forward(st, q, k, v, beta, g, s0, seg)


def _core_fwd(st, q, k, v, beta, g, s0, seg):
    o, s_final, tri = pallas_fwd.forward(st, q, k, v, beta, g, s0, seg, emit_tri=True)
    return (o, s_final), (q, k, v, beta, g, tri, s0, seg)


def _core_bwd(st, res, cts):
    q, k, v, beta, g, tri, s0, seg = res
    do, ds_final = cts
    states = pallas_fwd.states(st, k, v, beta, g, tri, s0, seg)
    dq, dk, dv, dbeta, dg, ds0 = pallas_bwd.backward(
        st, q, k, v, beta, g, tri, states, do.astype(q.dtype), ds_final.astype(F32), seg)
    d_seg = None if seg is None else jnp.zeros_like(seg)  # segment counts are not differentiated
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dbeta, dg, ds0, d_seg


_core.defvjp(_core_fwd, _core_bwd)
