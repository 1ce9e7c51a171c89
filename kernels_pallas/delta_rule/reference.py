"""Reference delta rule: the token-by-token recurrence, float32 state, with `lax.scan`; and the
one-token step that the scan and a mixer's decode cache share.

    S_t = exp(g_t) (I − β_t k_tᵀ k_t) r_t S_{t−1} + β_t k_tᵀ v_t          (update, then read)
    o_t = q_t S_t                      (r_t = 0 at a segment start, else 1; g_t = 0 without decay)

computed as S' = exp(g_t) r_t S_{t−1}, S_t = S' + β_t k_tᵀ (v_t − k_t S').

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim):
    q, k [b, t, h, k]; v [b, t, h, v]; beta [b, t, h]; log_decay None | [b, t, h] (<= 0);
    state [b, h, k, v] float32; starts None | [b, t] bool (True where a segment starts;
    linear_attention.api.segment_starts).

This is the ground truth the chunked (`xla`) and kernel (`pallas`) forms are tested against.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_F32 = jnp.float32


def delta_rule_step(q, k, v, beta, state, log_decay=None, keep=None):
    """One token. q, k [b, h, k]; v [b, h, v]; beta, log_decay (None: no decay) [b, h]; state
    [b, h, k, v]; keep None | [b] (0: a segment starts here, the old state is dropped).
    Returns (o [b, h, v] float32, new state [b, h, k, v] float32)."""
    q, k, v, beta = (x.astype(_F32) for x in (q, k, v, beta))
    state = state.astype(_F32)
    if log_decay is not None:
        state = state * jnp.exp(log_decay.astype(_F32))[..., None, None]
    if keep is not None:
        state = state * keep.astype(_F32)[:, None, None, None]
    pred = jnp.einsum("bhk,bhkv->bhv", k, state)  # what the state recalls for k_t
    state = state + (beta[..., None] * k)[..., :, None] * (v - pred)[..., None, :]
    return jnp.einsum("bhk,bhkv->bhv", q, state), state


def delta_rule_reference(q, k, v, beta, log_decay=None, initial_state=None, starts=None):
    """Returns (o [b, t, h, v] in q.dtype, final_state [b, h, k, v] float32)."""
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    if initial_state is None:
        initial_state = jnp.zeros((b, h, dk, dv), _F32)
    state0 = initial_state.astype(_F32)
    # inside shard_map the carry must vary like the inputs (zeros_like keeps their mesh axes)
    state0 = state0 + jnp.zeros_like(q[:, 0, :, :, None], dtype=_F32)
    time_major = lambda x: None if x is None else jnp.moveaxis(x, 1, 0)  # noqa: E731
    keep = None if starts is None else 1.0 - starts.astype(_F32)

    def step(state, xs):
        q_t, k_t, v_t, beta_t, g_t, keep_t = xs
        o_t, state = delta_rule_step(q_t, k_t, v_t, beta_t, state, g_t, keep_t)
        return state, o_t

    xs = tuple(time_major(x) for x in (q, k, v, beta, log_decay, keep))
    final_state, o = jax.lax.scan(step, state0, xs)
    return jnp.moveaxis(o, 0, 1).astype(q.dtype), final_state
