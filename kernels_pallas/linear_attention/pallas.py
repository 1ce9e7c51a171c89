"""impl="pallas": chunked linear attention as Pallas TPU (Mosaic) kernels, with a custom VJP.

    linear_attention_pallas(q, k, v, log_decay=None, initial_state=None, starts=None, *,
                            kind=None, chunk_size=None, blocks=None, matmul_dtype=None)
        -> (o [b, t, h, v] in q.dtype, final_state [b, h, k, v] float32)

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim): q, k [b, t, h, k] and v
[b, t, h, v] in float32 or bfloat16; log_decay None | [h] | [b, t, h, k]; initial_state [b, h, k, v];
starts None | [b, t] bool segment starts (api.segment_starts), masks beside the decay.

Forward: pallas_fwd; backward: pallas_bwd, and the log-decay gradient from the kernels' dq, dk by
the gate-gradient identity (docs/models.md, "The Pallas kernels"). `matmul_dtype` (default the
input dtype): bfloat16 feeds the MXU bf16 operands with f32 accumulation; jnp.float32 multiplies
everything in float32 at HIGHEST (the reference path). `blocks` (chunk, sub-chunk, grid order,
VMEM limit) default to the TPU generation's row (config.TPU_BLOCKS); every pallas_call carries a
pl.CostEstimate (cost.py). Tolerances: docs/results.md, "Pallas kernels on TPU".

Backends: TPU compiles with Mosaic; CPU runs the same kernels in TPU interpret mode (out-of-bounds
reads raise, scratch starts as NaN) so tests execute the real kernel code. GPU is not supported
(TPU memory spaces and grid semantics): a clear error says to use impl='xla'.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu

from kernels_pallas.linear_attention import pallas_bwd, pallas_fwd
from kernels_pallas.linear_attention.config import (
    LinearAttentionBlocks,
    check_tiling,
    check_vmem,
    default_blocks,
)
from kernels_pallas.linear_attention.kind import DecayKind
from kernels_pallas.linear_attention.pallas_chunk import F32, Static

_DTYPES = (jnp.float32, jnp.bfloat16)


def default_interpret(backend: str):
    """False (compile) on TPU, TPU interpret mode on CPU; GPU is refused with a clear message."""
    if backend == "tpu":
        return False
    if backend == "cpu":
        return pltpu.InterpretParams(out_of_bounds_reads="raise")
    raise NotImplementedError(
        f"linear_attention(impl='pallas') has TPU (Mosaic) kernels only; backend {backend!r} is not "
        "supported. Use impl='xla' (chunked XLA form) on this backend."
    )


def _check(q, k, v, log_decay, initial_state):
    if q.ndim != 4 or k.shape != q.shape or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            "linear_attention_pallas: expected q, k [b, t, h, k] and v [b, t, h, v] with equal "
            f"b, t, h; got q {q.shape}, k {k.shape}, v {v.shape}."
        )
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype not in _DTYPES:
            raise ValueError(f"linear_attention_pallas: {name} has dtype {x.dtype}; "
                             "use float32 or bfloat16.")
    b, t, h, dk = q.shape
    if t == 0:
        raise ValueError("linear_attention_pallas: empty sequence (t = 0).")
    if log_decay is not None and log_decay.shape not in ((h,), (b, t, h, dk)):
        raise ValueError(f"linear_attention_pallas: log_decay must be None, [h]={(h,)} or "
                         f"[b, t, h, k]={(b, t, h, dk)}; got {log_decay.shape}.")
    if initial_state is not None and initial_state.shape != (b, h, dk, v.shape[-1]):
        raise ValueError(f"linear_attention_pallas: initial_state must be [b, h, k, v]="
                         f"{(b, h, dk, v.shape[-1])}; got {initial_state.shape}.")


def linear_attention_pallas(q, k, v, log_decay=None, initial_state=None, starts=None, *,
                            kind=None, chunk_size=None, blocks: LinearAttentionBlocks | None = None,
                            interpret=None, matmul_dtype=None):
    """See the module docstring. `kind`: DecayKind (None: resolved from log_decay). `blocks`
    overrides the backend's (TPU: the generation's) default blocks, `interpret` the backend's
    default execution mode (True: the generic Pallas interpreter), `matmul_dtype` (float32 |
    bfloat16; None: q's dtype) the dtype of the in-kernel matmul operands."""
    _check(q, k, v, log_decay, initial_state)
    backend = jax.default_backend()
    if interpret is None:
        interpret = default_interpret(backend)
    mosaic = interpret is False  # Mosaic TPU compilation (also when exporting from a CPU host)
    blocks = blocks or default_blocks("tpu" if mosaic else backend)
    mxu = jnp.dtype(q.dtype if matmul_dtype is None else matmul_dtype)
    if mxu not in _DTYPES:
        raise ValueError(f"linear_attention_pallas: matmul_dtype={mxu.name}; use float32 or "
                         "bfloat16.")
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    # Never use a chunk longer than the (16-rounded) sequence: prefill of a short prompt.
    chunk = min(chunk_size or blocks.chunk_size, -(-t // 16) * 16)
    blocks = blocks.with_chunk_size(chunk)
    check_tiling(blocks, dk, dv, h, q.dtype, "tpu" if mosaic else "cpu")

    kind = DecayKind.of(log_decay) if kind is None else DecayKind(kind)
    check_vmem(blocks, dk, dv, q.dtype.itemsize, kind == DecayKind.DATA, starts is not None)
    st = Static(kind=kind, chunk=blocks.chunk_size, sub=blocks.sub_chunk, num_heads=h,
                key_dim=dk, value_dim=dv, t_real=t, interpret=interpret,
                segments=starts is not None, mxu=mxu.name, grid_order=blocks.grid_order,
                vmem_limit_bytes=blocks.vmem_limit_bytes if mosaic else None)
    tp = -(-t // st.chunk) * st.chunk
    seg = None
    if starts is not None:  # starts counted from each chunk start, [b, tp, 1] float32
        padded = jnp.pad(starts, ((0, 0), (0, tp - t))).reshape(b, tp // st.chunk, st.chunk)
        seg = jnp.cumsum(padded.astype(jnp.int32), axis=-1).astype(F32).reshape(b, tp, 1)

    def flat(x):  # [b, t, h, w] -> [b, tp, h*w], zero padded (zero log decay = no decay)
        x = jnp.pad(x, ((0, 0), (0, tp - t), (0, 0), (0, 0)))
        return x.reshape(b, tp, -1)

    decay = None
    if kind == DecayKind.HEAD:
        decay = log_decay.astype(F32)
    elif kind == DecayKind.DATA:
        decay = flat(log_decay.astype(F32))
    if initial_state is None:
        s0 = jnp.zeros((b, h, dv, dk), F32)
    else:
        s0 = jnp.swapaxes(initial_state.astype(F32), -1, -2)
    o, s_final = _core(st, flat(q), flat(k), flat(v), decay, s0, seg)
    return o.reshape(b, tp, h, dv)[:, :t], jnp.swapaxes(s_final, -1, -2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(st, q, k, v, decay, s0, seg):
    return pallas_fwd.forward(st, q, k, v, decay, s0, seg)


def _core_fwd(st, q, k, v, decay, s0, seg):
    o, s_final = pallas_fwd.forward(st, q, k, v, decay, s0, seg)
    return (o, s_final), (q, k, v, decay, s0, s_final, seg)


def _core_bwd(st, res, cts):
    q, k, v, decay, s0, s_final, seg = res
    do, ds_final = cts
    dq, dk, dv, ds0 = pallas_bwd.backward(
        st, q, k, v, decay, s0, do, ds_final.astype(F32), seg)
    d_decay = None
    if st.kind != DecayKind.NONE:
        b, tp, _ = q.shape
        grad_cum = q.astype(F32) * dq - k.astype(F32) * dk  # dL/dB_t, [b, t, h*k]
        at_end = jnp.sum(ds_final * s_final, axis=-2).reshape(b, 1, -1)  # rowsum(dS_T ⊙ S_T)
        d_step = jax.lax.cumsum(grad_cum, axis=1, reverse=True) + at_end
        if st.kind == DecayKind.DATA:
            d_decay = d_step
        else:  # per-head: every real step of every row and key channel shares the decay
            d_decay = jnp.sum(d_step[:, :st.t_real].reshape(b, st.t_real, st.num_heads, -1),
                              axis=(0, 1, 3))
    d_seg = None if seg is None else jnp.zeros_like(seg)  # segment counts are not differentiated
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), d_decay, ds0, d_seg


_core.defvjp(_core_fwd, _core_bwd)
