"""Glue between the linear mixers and `kernels_pallas.linear_attention` (the only entry point).

Legend: b batch, t sequence, h heads, k key dim, v value dim.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from kernels_pallas import linear_attention, segment_reset_log_decay
from linscale_jax.models.config import ModelConfig


def run_linear_attention(cfg: ModelConfig, q, k, v, log_decay, segment_ids, cache):
    """q,k [b,t,h,k]; v [b,t,h,v]; log_decay None | [h] | [b,t,h,k]; segment_ids [b,t] | None;
    cache None (training forward) or the state [b,h,k,v] float32 to continue from.

    Returns (o [b,t,h,v], new state or None). Packed documents: the decay is set to
    RESET_LOG_DECAY at every change of segment id so the state never crosses documents.
    One-token steps use the exact recurrence (impl="reference")."""
    if segment_ids is not None:
        log_decay = segment_reset_log_decay(log_decay, segment_ids, q.shape[2], q.shape[3])
    if cache is None:
        o = linear_attention(q, k, v, log_decay=log_decay, impl=cfg.impl, chunk_size=cfg.chunk_size)
        return o, None
    impl = "reference" if q.shape[1] == 1 else cfg.impl
    o, state = linear_attention(
        q, k, v, log_decay=log_decay, initial_state=cache, return_final_state=True,
        impl=impl, chunk_size=cfg.chunk_size,
    )
    return o, state


def zero_state(batch_size: int, n_heads: int, key_dim: int, value_dim: int):
    """[b, h, k, v] float32 zeros."""
    return jnp.zeros((batch_size, n_heads, key_dim, value_dim), jnp.float32)


def lrpe_theta_init(n_heads: int, d_model: int) -> np.ndarray:
    """θ [h, e] = 10000^(-2j/d), j = 0..d-1."""
    return (10000.0 ** (-2.0 * np.arange(d_model) / d_model)).reshape(n_heads, -1).astype(np.float32)


def lrpe(x, positions, theta):
    """x [b,t,h,e], positions [b,t], θ [h,e] -> [b,t,h,2e] (cos half, sin half), in x.dtype."""
    ang = positions.astype(jnp.float32)[:, :, None, None] * theta.astype(jnp.float32)[None, None]
    xf = x.astype(jnp.float32)
    return jnp.concatenate([xf * jnp.cos(ang), xf * jnp.sin(ang)], axis=-1).astype(x.dtype)
