"""cosFormer2's Toeplitz positional encoding (TPE), applied once to the embedding output.

    tpe = make_tpe(cfg, keys)                          # None for model.cosformer2.tpe = "none"
    y, cache = tpe(x, segment_ids, cache)              # x, y [b, t, d]; cache None or the decode state

model.cosformer2.tpe selects it (legend: b batch, t sequence, d width, e = d/h head dim):
  "lightnet"         (default) LightNet's TPE as the paper counts it: y_t = x_t + s_t Wᵀ with
                     s_t = λ ⊙ s_{t-1} + (1 - λ) ⊙ SimpleRMSNorm(x_t) W, one tied W [d, e] and e
                     rates: Table 1's d·e parameters;
  "lightnet_untied"  separate W_up [d, e] and W_down [e, d] (2·d·e + e parameters);
  "xmixers"          the per-head module of Doraemonzzz/xmixers `pes/tpe.py`, for comparison;
  "none"             no TPE.
The recurrence runs as a sequential lax.scan under model.impl="reference", else as a parallel
associative scan; packed documents reset it. The choices where LightNet and the paper are silent,
and the FLOPs: docs/models.md, "cosFormer2's TPE".
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from linscale_jax.models.config import ModelConfig
from linscale_jax.models.layers import (KeyGen, Linear, merge_heads, normal_param, simple_rms_norm,
                                        split_heads)
from linscale_jax.models.linear_common import run_linear_attention, zero_state


def tpe_log_rate_init(e: int) -> np.ndarray:
    """a [e] with exp(a_c) = 2^(-8(c+1)/e): ALiBi-like rates over the e channels."""
    return (np.log(2.0) * (-8.0 * np.arange(1, e + 1) / e)).astype(np.float32)


def diagonal_recurrence(u, log_decay, segment_ids=None, initial_state=None, impl: str = "auto"):
    """s_t = exp(log_decay) ⊙ s_{t-1} + u_t along t, reset to 0 at every change of segment id.

    u [b, t, e]; log_decay [e] (<= 0); segment_ids [b, t] int | None; initial_state [b, e] | None
    (the state before u_0, kept at t = 0 as in kernels_pallas' segment convention).
    Returns (s [b, t, e] in u.dtype, final state [b, e] float32). impl "reference": sequential
    lax.scan; otherwise a parallel associative scan.
    """
    b, t, e = u.shape
    uf = u.astype(jnp.float32)
    a = jnp.broadcast_to(jnp.exp(log_decay.astype(jnp.float32))[None, None], (b, t, e))
    if segment_ids is not None:
        starts = jnp.concatenate(
            [jnp.zeros((b, 1), bool), segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)
        a = jnp.where(starts[:, :, None], 0.0, a)
    s0 = jnp.zeros((b, e), jnp.float32) if initial_state is None else initial_state.astype(jnp.float32)
    if impl == "reference":
        def step(s, xs):
            a_t, u_t = xs
            s = a_t * s + u_t
            return s, s

        last, s = jax.lax.scan(step, s0, (jnp.swapaxes(a, 0, 1), jnp.swapaxes(uf, 0, 1)))
        return jnp.swapaxes(s, 0, 1).astype(u.dtype), last

    def combine(left, right):
        a_l, b_l = left
        a_r, b_r = right
        return a_l * a_r, a_r * b_l + b_r

    a_cum, s = jax.lax.associative_scan(combine, (a, uf), axis=1)
    s = s + a_cum * s0[:, None, :]
    return s.astype(u.dtype), s[:, -1]


class LightNetTPE(nnx.Module):
    """x [b,t,d] -> x + (per-channel moving average of SimpleRMSNorm(x) W_up) W_down, with
    W_down = W_upᵀ when tied (module doc)."""

    def __init__(self, cfg: ModelConfig, *, keys: KeyGen, tied: bool = True):
        d, e = cfg.d_model, cfg.head_dim
        self.up = Linear(d, e, keys=keys, std=cfg.init_std, axes=("embed", "rank"))
        if not tied:
            self.down = Linear(e, d, keys=keys, std=cfg.init_std, axes=("rank", "embed"))
        self.log_rate = nnx.Param(jnp.asarray(tpe_log_rate_init(e)), axes=(None,))
        self.tied = tied
        self.cfg = cfg

    def project_back(self, s):
        """s [b, t, e] -> [b, t, d]: W_upᵀ (tied) or W_down."""
        if not self.tied:
            return self.down(s)
        w = self.up.kernel[...]
        return jnp.einsum("bte,de->btd", s, w.astype(s.dtype))

    def log_decay(self):
        """log λ [e] = -exp(a)."""
        return -jnp.exp(self.log_rate[...])

    def __call__(self, x, segment_ids, cache):
        log_decay = self.log_decay()
        u = self.up(simple_rms_norm(x, self.cfg.norm_eps)) * (-jnp.expm1(log_decay)).astype(x.dtype)
        impl = "reference" if self.cfg.impl == "reference" else "scan"
        s, state = diagonal_recurrence(u, log_decay, segment_ids, cache, impl)
        return x + self.project_back(s), (state if cache is not None else None)

    def init_cache(self, batch_size: int):
        return jnp.zeros((batch_size, self.cfg.head_dim), jnp.float32)


class XmixersTPE(nnx.Module):
    """The later per-head rank-1 TPE (model.cosformer2.tpe = "xmixers"): x [b,t,d] -> [b,t,d] (module doc)."""

    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        h, e = cfg.n_heads, cfg.head_dim
        self.q = nnx.Param(jax.random.normal(keys(), (h, e), jnp.float32), axes=("gain", "gain"))
        self.k = nnx.Param(jax.random.normal(keys(), (h, e), jnp.float32), axes=("gain", "gain"))
        self.decay_logit = nnx.Param(jax.random.normal(keys(), (h,), jnp.float32), axes=(None,))
        self.proj = normal_param(keys, (h, e, e), cfg.init_std, (None, None, None))
        self.cfg = cfg

    def __call__(self, x, segment_ids, cache):
        h = self.cfg.n_heads
        v = split_heads(x, h)
        q = jnp.broadcast_to(self.q[...].astype(x.dtype), v.shape)
        k = jnp.broadcast_to(self.k[...].astype(x.dtype), v.shape)
        log_decay = jax.nn.log_sigmoid(self.decay_logit[...])
        u, cache = run_linear_attention(self.cfg, q, k, v, log_decay, segment_ids, cache)
        u = simple_rms_norm(u, self.cfg.norm_eps)  # per head
        y = jnp.einsum("bthe,hef->bthf", u, self.proj[...].astype(u.dtype))
        return merge_heads(y), cache

    def init_cache(self, batch_size: int):
        e = self.cfg.head_dim
        return zero_state(batch_size, self.cfg.n_heads, e, e)


TPE_MODULES = {"lightnet": LightNetTPE, "lightnet_untied": functools.partial(LightNetTPE, tied=False),
               "xmixers": XmixersTPE}
TPES = tuple(TPE_MODULES) + ("none",)


def make_tpe(cfg: ModelConfig, keys: KeyGen):
    """The model.cosformer2.tpe module, or None for "none"."""
    tpe = cfg.cosformer2.tpe
    return None if tpe == "none" else TPE_MODULES[tpe](cfg, keys=keys)
