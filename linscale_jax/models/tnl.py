"""TNL (TransNormerLLM): linear attention with a data-independent per-head decay.

Legend: b batch, t sequence, h heads, e = d/h head dim, d width, l layers, j layer index.

    Q = swish(X̄ W_q), K = swish(X̄ W_k), V = X̄ W_v          (no 1/sqrt(e) scale)
    S_t = λ S_{t-1} + k_tᵀ v_t,  o_t = q_t S_t                 (per head, λ = exp(log_decay))
    O = SimpleRMSNorm(concat_heads(o)) ⊙ sigmoid(X̄ W_gdown W_gup)  (gate rank d/h), then W_o.

Options (TNLOptions, `--config.model.tnl.<option>`):

Decay rule (model.tnl.decay_rule):
  "paper" (default; the TNL paper's formula λ = exp(-(8i/h)(1 - j/l)), head i = 0..h-1, layer
      j = 0..l-1, as flash-linear-attention reads it): log λ_{i,j} = -(8/h)(1 - j/l) i. Head 0 has
      no decay in every layer; the other heads' memories 1/(1-λ) are short (a few tokens) and grow
      with depth, the last layer's slowest decayed head keeping 1/(1 - exp(-8/(hl))) tokens.
  "alibi_layer" (released TNL checkpoints): ALiBi slopes s_i (i = 1..h; for h not a power of two
      ALiBi's interleave rule), scaled per layer s_{i,j} = s_i (1 - j/(l-1) + 1e-5) (l = 1: factor
      1 + 1e-5), log λ = -s. First layer decays fastest, the last (all its heads) almost not at all.

Released TransNormerLLM switches (interop): model.tnl.gate="linear" replaces the gate by a full-rank
multiplier X̄ W_u (no activation); model.tnl.lrpe=True applies cosFormer2's LRPE to q, k (θ [h, e]
per layer, q/k head dim doubles); model.embed_scale="sqrt_d" (the decoder's, common to every arch).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
from flax import nnx

from linscale_jax.models import registry
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.decoder import Decoder
from linscale_jax.models.layers import KeyGen, Linear, LowRankGate, make_norm, merge_heads
from linscale_jax.models.linear_common import (init_cache, linear_attention_flops, lrpe_theta_init,
                                               make_short_conv, qkv_attention, short_conv_flops,
                                               short_conv_state_floats)
from linscale_jax.models.options import option


@dataclasses.dataclass(frozen=True)
class TNLOptions:
    """model.tnl: decay_rule paper (exp(-(8i/h)(1 - j/l))) | alibi_layer (released TNL); gate
    lowrank (paper: sigmoid(X W_gdown W_gup)) | linear (released: X W_u); lrpe: LRPE on q, k
    (released TransNormerLLM; θ [h, e] per layer)."""

    decay_rule: str = option("paper", choices=("paper", "alibi_layer"))
    gate: str = option("lowrank", choices=("lowrank", "linear"), shape=True)
    lrpe: bool = option(False, shape=True)


def alibi_slopes(n_heads: int) -> np.ndarray:
    """ALiBi head slopes [h]: 2^(-8i/h), i = 1..h, with the interleave rule for non powers of two."""

    def power_of_two(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return np.asarray(power_of_two(n_heads), np.float64)
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = alibi_slopes(2 * closest)[0::2][: n_heads - closest]
    return np.concatenate([power_of_two(closest), extra])


def tnl_log_decay(rule: str, n_heads: int, layer_idx: int, n_layers: int) -> np.ndarray:
    """log λ per head [h] (float32, < 0 except the paper rule's head 0) for layer j of l."""
    if rule == "alibi_layer":
        frac = layer_idx / (n_layers - 1) if n_layers > 1 else 0.0
        s = alibi_slopes(n_heads) * (1.0 - frac + 1e-5)
        return (-s).astype(np.float32)
    if rule == "paper":
        return (-(8.0 / n_heads) * (1.0 - layer_idx / n_layers) * np.arange(n_heads)).astype(np.float32)
    raise ValueError(f"unknown model.tnl.decay_rule {rule!r}; choose paper or alibi_layer.")


class TNLAttention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        d, std = cfg.d_model, cfg.init_std
        self.wq = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wk = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wv = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        if cfg.tnl.gate == "lowrank":
            self.gate = LowRankGate(d, cfg.head_dim, keys=keys, std=std)
        else:  # released TransNormerLLM: full-rank multiplier u = X̄ W_u, no activation
            self.wu = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wo = Linear(d, d, keys=keys, std=std, axes=("heads", "embed"))
        if cfg.tnl.lrpe:
            self.theta = nnx.Param(jnp.asarray(lrpe_theta_init(cfg.n_heads, d)), axes=("gain", "gain"))
        self.out_norm = make_norm(cfg, cfg.out_norm_eps)
        self.conv = make_short_conv(cfg, keys)
        self.cfg = cfg

    def __call__(self, x, *, positions, segment_ids, cache, extra):
        """extra = this layer's log decay [h] (TNL.layer_extras)."""
        o, cache = qkv_attention(self.cfg, x, (self.wq, self.wk, self.wv), self.conv,
                                 positions=positions, segment_ids=segment_ids, cache=cache,
                                 log_decay=extra, theta=self.theta[...] if self.cfg.tnl.lrpe else None)
        gate = self.gate(x) if self.cfg.tnl.gate == "lowrank" else self.wu(x)
        return self.wo(self.out_norm(merge_heads(o)) * gate), cache

    def init_cache(self, batch_size: int, max_len: int):
        e = self.cfg.head_dim
        return init_cache(self.cfg, batch_size, 2 * e if self.cfg.tnl.lrpe else e)


class TNL(Decoder):
    def layer_extras(self):
        """Per-layer log decay, stacked [l, h] (constants from the config's decay rule)."""
        c = self.cfg
        return jnp.asarray(np.stack([tnl_log_decay(c.tnl.decay_rule, c.n_heads, j, c.n_layers)
                                     for j in range(c.n_layers)]))


def decay_per_layer(cfg) -> list[list[float]]:
    """TNL's per-head decay rates λ = exp(log λ) per layer, [l][h] (rounded to 6 digits)."""
    return [[round(float(x), 6) for x in np.exp(tnl_log_decay(cfg.tnl.decay_rule, cfg.n_heads, j,
                                                                cfg.n_layers).astype(np.float64))]
            for j in range(cfg.n_layers)]


def _layer_flops(cfg, seq_len: int, chunk: int) -> float:
    """Linear attention (key dim 2e with LRPE), the output gate: low rank e (2·2de) or the
    released full-rank multiplier (2d²), and the short convolution (2·K·3d)."""
    d, h, e = cfg.d_model, cfg.n_heads, cfg.head_dim
    mixer = linear_attention_flops(h, 2 * e if cfg.tnl.lrpe else e, e, chunk)
    return mixer + (2 * 2 * d * e if cfg.tnl.gate == "lowrank" else 2 * d * d) + short_conv_flops(cfg)


registry.register(registry.ArchSpec(
    name="tnl", mixer=TNLAttention, model=TNL,
    paper_params_extra=lambda l, d, h: 2 * l * d * d // h,
    paper_flops_x=lambda d, h, n: 1 / (2 * h) + 5 / (18 * d),
    layer_flops=_layer_flops, paper_layers={"410m": 25},
    describe_extras=lambda cfg: {"decay_per_layer": decay_per_layer(cfg)},
    state_floats=lambda cfg, n: (cfg.n_heads * (2 if cfg.tnl.lrpe else 1) * cfg.head_dim ** 2
                                 + short_conv_state_floats(cfg)),
    options=TNLOptions))
