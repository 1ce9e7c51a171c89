"""Shape and dtype validation for the linear_attention entry point; every message names the fix.

Legend: b batch, t sequence, h heads, k key dim, v value dim. Checks only static facts (shapes,
dtypes), so it is free under `jax.jit`.
"""

from __future__ import annotations

import jax.numpy as jnp

_FLOATS = (jnp.float32, jnp.bfloat16, jnp.float16)


def _is_float(x):
    return any(x.dtype == d for d in _FLOATS)


def validate_inputs(q, k, v, log_decay=None, initial_state=None, segment_ids=None):
    """Raise ValueError unless q, k [b, t, h, k], v [b, t, h, v], log_decay None | [h] |
    [b, t, h, k], initial_state None | [b, h, k, v] (all floating point), segment_ids None |
    [b, t] integer."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if getattr(x, "ndim", None) != 4:
            want = "[b, t, h, v]" if name == "v" else "[b, t, h, k]"
            raise ValueError(
                f"linear_attention: {name} must be a 4-d array {want} (batch, sequence, heads, "
                f"features); got shape {getattr(x, 'shape', type(x))}. Add the batch/head axes "
                f"(e.g. x[None] or x.reshape(b, t, h, -1))."
            )
        if not _is_float(x):
            raise ValueError(
                f"linear_attention: {name} must be float32, bfloat16 or float16; got {x.dtype}. "
                f"Cast it, e.g. {name}.astype(jnp.float32)."
            )
    b, t, h, dk = q.shape
    if k.shape != q.shape:
        raise ValueError(
            f"linear_attention: k must have the shape of q [b, t, h, k] = {q.shape}; got {k.shape}."
        )
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"linear_attention: v must be [b, t, h, v] with b, t, h of q ({b}, {t}, {h}); got "
            f"{v.shape}."
        )
    if t < 1:
        raise ValueError(
            "linear_attention: the sequence axis (t, axis 1) is empty; pass t >= 1 tokens."
        )
    if log_decay is not None:
        if log_decay.shape not in ((h,), (b, t, h, dk)) or not _is_float(log_decay):
            raise ValueError(
                f"linear_attention: log_decay must be None, [h] = ({h},) or [b, t, h, k] = "
                f"{(b, t, h, dk)} floating point (log of the decay, <= 0); got shape "
                f"{log_decay.shape}, dtype {log_decay.dtype}. Broadcast a per-channel decay to "
                f"[b, t, h, k] or pass one value per head."
            )
    if initial_state is not None:
        dv = v.shape[-1]
        if initial_state.shape != (b, h, dk, dv) or not _is_float(initial_state):
            raise ValueError(
                f"linear_attention: initial_state must be None or a float array [b, h, k, v] = "
                f"{(b, h, dk, dv)}; got shape {initial_state.shape}, dtype {initial_state.dtype}. "
                f"Pass the final_state returned by an earlier call (return_final_state=True)."
            )
    if segment_ids is not None:
        if getattr(segment_ids, "shape", None) != (b, t) or not jnp.issubdtype(
                segment_ids.dtype, jnp.integer):
            raise ValueError(
                f"linear_attention: segment_ids must be None or an integer array [b, t] = "
                f"{(b, t)} (a change of id starts a document); got shape "
                f"{getattr(segment_ids, 'shape', type(segment_ids))}, dtype "
                f"{getattr(segment_ids, 'dtype', None)}. Pass e.g. segment_ids.astype(jnp.int32)."
            )
