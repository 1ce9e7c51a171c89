"""Reference linear attention: the token-by-token recurrence, fp32 state, with `lax.scan`.

    S_t = Diag(exp(log_decay_t)) S_{t-1} + k_tᵀ v_t        (update, then read)
    o_t = q_t S_t

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim):
    q, k: [b, t, h, k];  v: [b, t, h, v];  state: [b, h, k, v] float32
    log_decay: None | [h] | [b, t, h, k]   (log of the per-step decay, <= 0)

This is the ground truth that the chunked (`xla`) and kernel (`pallas`) forms are tested against.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def linear_attention_reference(q, k, v, log_decay=None, initial_state=None):
    """Returns (o [b, t, h, v] in q.dtype, final_state [b, h, k, v] float32)."""
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    f32 = jnp.float32
    qf, kf, vf = (x.astype(f32) for x in (q, k, v))
    if initial_state is None:
        initial_state = jnp.zeros((b, h, dk, dv), f32)
    state0 = initial_state.astype(f32)

    if log_decay is None:
        decay_seq = None
    elif log_decay.ndim == 1:
        decay_seq = None
        head_decay = jnp.exp(log_decay.astype(f32))[None, :, None, None]  # [1, h, 1, 1]
    else:
        decay_seq = jnp.exp(log_decay.astype(f32))  # [b, t, h, k]

    def step(state, inputs):
        q_t, k_t, v_t, d_t = inputs  # [b, h, k], [b, h, k], [b, h, v], [b, h, k] | None
        if d_t is not None:
            state = state * d_t[..., None]
        elif log_decay is not None:
            state = state * head_decay
        state = state + k_t[..., :, None] * v_t[..., None, :]
        o_t = jnp.einsum("bhk,bhkv->bhv", q_t, state)
        return state, o_t

    xs = (
        jnp.moveaxis(qf, 1, 0),
        jnp.moveaxis(kf, 1, 0),
        jnp.moveaxis(vf, 1, 0),
        None if decay_seq is None else jnp.moveaxis(decay_seq, 1, 0),
    )
    final_state, o = jax.lax.scan(step, state0, xs)
    return jnp.moveaxis(o, 0, 1).astype(q.dtype), final_state
