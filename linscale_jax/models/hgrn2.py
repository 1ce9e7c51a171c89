"""HGRN2: gated linear RNN with data-dependent decay, depth-wise lower bounds, outer-product state.

Legend: b batch, t sequence, h heads, e = d/h head dim, d width, l layers, j layer index.

    P = softmax(Γ, axis=layers), β = cumsum(P) - P[0]       Γ [l, d] (init ones -> β_j = j/l)
    f_t = β_j + (1 - β_j) sigmoid(X̄ W_f),  k_t = 1 - f_t,  q_t = silu(X̄ W_q),  v_t = X̄ W_i
    S_t = Diag(f_t) S_{t-1} + k_tᵀ v_t,  y_t = q_t S_t       (state e×e per head, scale 1)
    output SimpleRMSNorm(concat_heads(y)) W_o

Options (HGRN2Options, `--config.model.hgrn2.<option>`): q_scale="rsqrt_k" scales q by e^-1/2 (fla's
release; the paper: 1). The linear block's model.norm_scale / mixer_norm_eps give the norms
learnable scales / their own eps (fla).

Everything about the gate is computed in log space, in float32:
    log β_j   = logsumexp(log P[1..j])          (layer 0: β_0 = 0 exactly: log β_0 = -inf)
    log(1-β_j) = logsumexp(log P[{0} ∪ {j+1..l-1}])
    log f = logaddexp(log β_j, log(1-β_j) + log_sigmoid(z)),  k = -expm1(log f)
so no 1 - (something close to 1) is ever formed.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from linscale_jax.models import registry
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.decoder import Decoder
from linscale_jax.models.layers import KeyGen, Linear, make_norm, merge_heads, split_heads, unstack
from linscale_jax.models.linear_common import (init_cache, join_cache, linear_attention_flops,
                                               make_short_conv, project, run_linear_attention,
                                               short_conv_flops, short_conv_state_floats)
from linscale_jax.models.options import option


@dataclasses.dataclass(frozen=True)
class HGRN2Options:
    """model.hgrn2: q_scale one (paper) | rsqrt_k (fla: q scaled by (d/h)^-1/2)."""

    q_scale: str = option("one", choices=("one", "rsqrt_k"))


def lower_bounds_log(gamma):
    """Γ [l, d] -> (log β [l, d], log(1-β) [l, d]) in float32. log β[0] = -inf (β_0 = 0)."""
    lp = jax.nn.log_softmax(gamma.astype(jnp.float32), axis=0)  # log P
    neg_inf = jnp.full_like(lp[:1], -jnp.inf)
    # log β_j = log Σ_{1<=i<=j} P_i
    log_beta = jnp.concatenate([neg_inf, jax.lax.cumlogsumexp(lp[1:], axis=0)], axis=0)
    # log(1 - β_j) = log (P_0 + Σ_{i>j} P_i)
    tail = jax.lax.cumlogsumexp(lp, axis=0, reverse=True)  # tail[j] = log Σ_{i>=j} P_i
    tail_after = jnp.concatenate([tail[1:], neg_inf], axis=0)  # log Σ_{i>j} P_i
    log_one_minus = jnp.logaddexp(lp[:1], tail_after)
    # layer 0: β_0 = 0 exactly, i.e. (log β, log(1-β)) = (-inf, 0); logaddexp(-inf, a) = a exactly
    # with gradient 1 (and 0 towards the constant -inf), so no NaN reaches Γ.
    log_one_minus = jnp.concatenate([jnp.zeros_like(lp[:1]), log_one_minus[1:]], axis=0)
    return log_beta, log_one_minus


def beta_values(gamma):
    """β [l, d] = cumsum(softmax(Γ)) - P[0] (direct form; for inspection and tests)."""
    p = jax.nn.softmax(gamma.astype(jnp.float32), axis=0)
    return jnp.cumsum(p, axis=0) - p[0]


def gate_log_f(z, log_beta=None, log_one_minus_beta=None):
    """log f = log(β + (1-β) sigmoid(z)) in float32; β = 0 (layer 0) when log_beta is None.
    z [..., d]; log_beta, log_one_minus_beta [d]."""
    z = z.astype(jnp.float32)
    if log_beta is None:
        return jax.nn.log_sigmoid(z)
    return jnp.logaddexp(log_beta, log_one_minus_beta + jax.nn.log_sigmoid(z))


class HGRN2Mixer(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        d, std = cfg.d_model, cfg.init_std
        self.wq = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wf = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wi = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wo = Linear(d, d, keys=keys, std=std, axes=("heads", "embed"))
        self.out_norm = make_norm(cfg, cfg.out_norm_eps)
        self.conv = make_short_conv(cfg, keys)
        self.cfg = cfg

    def __call__(self, x, *, positions, segment_ids, cache, extra):
        """extra = (log β_j [d], log(1-β_j) [d]) for this layer."""
        h = self.cfg.n_heads
        z, state, history = project(x, (self.wq, self.wf, self.wi), self.conv, positions, cache)
        zq, zf, v = unstack(z, -2)
        log_f = gate_log_f(zf, *extra)
        k = (-jnp.expm1(log_f)).astype(x.dtype)
        q = jax.nn.silu(zq)
        if self.cfg.hgrn2.q_scale == "rsqrt_k":
            q = q * jnp.asarray(self.cfg.head_dim**-0.5, q.dtype)
        q, k, v = (split_heads(a, h) for a in (q, k, v))
        log_f = split_heads(log_f, h)
        y, state = run_linear_attention(self.cfg, q, k, v, log_f, segment_ids, state)
        y = self.out_norm(merge_heads(y))
        return self.wo(y), (None if cache is None else join_cache(state, history))

    def init_cache(self, batch_size: int, max_len: int):
        return init_cache(self.cfg, batch_size, self.cfg.head_dim)


class HGRN2(Decoder):
    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        super().__init__(cfg, keys=keys)
        # Lower-bound logits Γ (init ones: uniform softmax, β_j = j/l).
        self.lower_bounds = nnx.Param(jnp.ones((cfg.n_layers, cfg.d_model), jnp.float32),
                                      axes=("layers", "embed"))

    def layer_extras(self):
        log_beta, log_one_minus = lower_bounds_log(self.lower_bounds[...])
        return (log_beta, log_one_minus)  # stacked over layers [l, d]


def lower_bound_per_layer(cfg) -> list[float]:
    """β_j of every layer at initialisation (Γ = ones: β_j = j/l, the same for every channel)."""
    beta = beta_values(jnp.ones((cfg.n_layers, 1), jnp.float32))[:, 0]
    return [round(float(b), 6) for b in beta]


registry.register(registry.ArchSpec(
    name="hgrn2", mixer=HGRN2Mixer, model=HGRN2,
    describe_extras=lambda cfg: {"lower_bound_per_layer": lower_bound_per_layer(cfg)},
    paper_params_extra=lambda l, d, h: l * d,
    paper_flops_x=lambda d, h, n: 1 / (3 * h) + 29 / (72 * d),
    layer_flops=lambda cfg, n, chunk: (linear_attention_flops(cfg.n_heads, cfg.head_dim, cfg.head_dim,
                                                              chunk) + short_conv_flops(cfg)),
    state_floats=lambda cfg, n: (cfg.n_heads * cfg.head_dim * cfg.head_dim  # expand ratio e
                                 + short_conv_state_floats(cfg)),
    options=HGRN2Options))
