"""Shape and dtype validation for the delta_rule entry point; every message names the fix.

Legend: b batch, t sequence, h heads, k key dim, v value dim. Checks only static facts (shapes,
dtypes), so it is free under `jax.jit`.
"""

from __future__ import annotations

import jax.numpy as jnp

_FLOATS = (jnp.float32, jnp.bfloat16, jnp.float16)


def _is_float(x):
    return any(x.dtype == d for d in _FLOATS)


def _fail(msg):
    raise ValueError("delta_rule: " + msg)


def validate_inputs(q, k, v, beta, log_decay=None, initial_state=None, segment_ids=None):
    """Raise ValueError unless q, k [b, t, h, k], v [b, t, h, v], beta [b, t, h], log_decay None |
    [b, t, h], initial_state None | [b, h, k, v] (all floating point), segment_ids None | [b, t]
    integer."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if getattr(x, "ndim", None) != 4:
            want = "[b, t, h, v]" if name == "v" else "[b, t, h, k]"
            _fail(f"{name} must be a 4-d array {want} (batch, sequence, heads, features); got "
                  f"shape {getattr(x, 'shape', type(x))}. Add the batch/head axes (e.g. x[None] "
                  f"or x.reshape(b, t, h, -1)).")
        if not _is_float(x):
            _fail(f"{name} must be float32, bfloat16 or float16; got {x.dtype}. Cast it, e.g. "
                  f"{name}.astype(jnp.float32).")
    b, t, h, dk = q.shape
    if k.shape != q.shape:
        _fail(f"k must have the shape of q [b, t, h, k] = {q.shape}; got {k.shape}.")
    if v.shape[:3] != q.shape[:3]:
        _fail(f"v must be [b, t, h, v] with b, t, h of q ({b}, {t}, {h}); got {v.shape}.")
    if t < 1:
        _fail("the sequence axis (t, axis 1) is empty; pass t >= 1 tokens.")
    for name, x, what in (("beta", beta, "the write strength, e.g. sigmoid(x W_beta)"),
                          ("log_decay", log_decay, "the log of the per-token decay, <= 0")):
        if x is None and name == "log_decay":
            continue
        if getattr(x, "shape", None) != (b, t, h) or not _is_float(x):
            none = " None or" if name == "log_decay" else ""
            _fail(f"{name} must be{none} a float array [b, t, h] = {(b, t, h)} ({what}); got "
                  f"shape {getattr(x, 'shape', type(x))}, dtype {getattr(x, 'dtype', None)}. "
                  f"Give one value per token and head.")
    if initial_state is not None:
        dv = v.shape[-1]
        if initial_state.shape != (b, h, dk, dv) or not _is_float(initial_state):
            _fail(f"initial_state must be None or a float array [b, h, k, v] = {(b, h, dk, dv)}; "
                  f"got shape {initial_state.shape}, dtype {initial_state.dtype}. Pass the "
                  f"final_state returned by an earlier call (return_final_state=True).")
    if segment_ids is not None:
        if getattr(segment_ids, "shape", None) != (b, t) or not jnp.issubdtype(
                segment_ids.dtype, jnp.integer):
            _fail(f"segment_ids must be None or an integer array [b, t] = {(b, t)} (a change of "
                  f"id starts a document); got shape {getattr(segment_ids, 'shape', type(segment_ids))}"
                  f", dtype {getattr(segment_ids, 'dtype', None)}. Pass e.g. "
                  f"segment_ids.astype(jnp.int32).")


def validate_step(q, k, v, beta, state, log_decay=None):
    """Raise ValueError unless q, k [b, h, k], v [b, h, v], beta and log_decay [b, h], state
    [b, h, k, v]: one token of the decode step."""
    if getattr(q, "ndim", None) != 3 or getattr(k, "shape", None) != q.shape:
        _fail(f"step: q and k must be [b, h, k] of one token; got q {getattr(q, 'shape', None)}, "
              f"k {getattr(k, 'shape', None)}. Index the token, e.g. q[:, -1].")
    b, h, dk = q.shape
    if getattr(v, "ndim", None) != 3 or v.shape[:2] != (b, h):
        _fail(f"step: v must be [b, h, v] with b, h = {(b, h)}; got {getattr(v, 'shape', None)}.")
    for name, x in (("beta", beta), ("log_decay", log_decay)):
        if x is not None and getattr(x, "shape", None) != (b, h):
            _fail(f"step: {name} must be [b, h] = {(b, h)}; got {getattr(x, 'shape', None)}.")
    if getattr(state, "shape", None) != (b, h, dk, v.shape[-1]):
        _fail(f"step: state must be [b, h, k, v] = {(b, h, dk, v.shape[-1])}; got "
              f"{getattr(state, 'shape', None)}. Start from zeros or a final_state.")
