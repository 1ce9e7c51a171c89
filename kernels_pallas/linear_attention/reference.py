"""Reference linear attention: the token-by-token recurrence, fp32 state, with `lax.scan`.

    S_t = r_t Diag(exp(log_decay_t)) S_{t-1} + k_tᵀ v_t        (update, then read)
    o_t = q_t S_t                                            (r_t = 0 at a segment start, else 1)

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim):
    q, k: [b, t, h, k];  v: [b, t, h, v];  state: [b, h, k, v] float32
    log_decay: None | [h] | [b, t, h, k]   (log of the per-step decay, <= 0)
    starts: None | [b, t] bool             (True where a segment starts; see api.segment_starts)

This is the ground truth that the chunked (`xla`) and kernel (`pallas`) forms are tested against,
and the one-token decode step (t = 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels_pallas.linear_attention.kind import DecayKind


def linear_attention_reference(q, k, v, log_decay=None, initial_state=None, starts=None, *,
                               kind=None):
    """Returns (o [b, t, h, v] in q.dtype, final_state [b, h, k, v] float32). `kind` is the
    api.DecayKind value ("none" | "head" | "data"); None resolves it from log_decay."""
    kind = DecayKind.of(log_decay) if kind is None else DecayKind(kind)
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    f32 = jnp.float32
    qf, kf, vf = (x.astype(f32) for x in (q, k, v))
    if initial_state is None:
        initial_state = jnp.zeros((b, h, dk, dv), f32)
    state0 = initial_state.astype(f32)

    ld = kind.expand(log_decay)  # None | [1, 1, h, 1] | [b, t, h, k]
    decay_seq = None if ld is None else jnp.moveaxis(
        jnp.broadcast_to(jnp.exp(ld.astype(f32)), (ld.shape[0], t, h, ld.shape[-1])), 1, 0)
    keep = None if starts is None else jnp.moveaxis(1.0 - starts.astype(f32), 1, 0)  # [t, b]

    def step(state, inputs):
        # [b, h, k], [b, h, k], [b, h, v], None | [1, h, 1] | [b, h, k], None | [b]
        q_t, k_t, v_t, d_t, keep_t = inputs
        if d_t is not None:
            state = state * d_t[..., None]
        if keep_t is not None:
            state = state * keep_t[:, None, None, None]
        state = state + k_t[..., :, None] * v_t[..., None, :]
        o_t = jnp.einsum("bhk,bhkv->bhv", q_t, state)
        return state, o_t

    xs = tuple(jnp.moveaxis(x, 1, 0) for x in (qf, kf, vf)) + (decay_seq, keep)
    final_state, o = jax.lax.scan(step, state0, xs)
    return jnp.moveaxis(o, 0, 1).astype(q.dtype), final_state
