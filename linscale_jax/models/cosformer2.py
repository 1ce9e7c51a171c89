"""cosFormer2: linear attention without decay, LRPE, output norm + low-rank gate, and TPE.

Legend: b batch, t sequence, h heads, e = d/h head dim, d width.

Token mixer:
    Q = swish(X̄ W_q), K = swish(X̄ W_k), V = X̄ W_v
    LRPE (learnable θ [h, e], init θ = 10000^(-2j/d) for j = 0..d-1 laid out as [h, e]):
        q̃_t = [q_t ⊙ cos(θ t), q_t ⊙ sin(θ t)]  (same for k), so q̃_t·k̃_s = Σ_j q_tj k_sj cos(θ_j (t-s))
        and the q/k head dim doubles to 2e. Positions t are absolute (decoding) or restart at every
        packed document (training); only t - s matters.
    S_t = S_{t-1} + k̃_tᵀ v_t,  o_t = q̃_t S_t  (no decay)
    O = SimpleRMSNorm(concat_heads(o)) ⊙ sigmoid(X̄ W_gdown W_gup), then W_o.

TPE (Toeplitz positional encoding), applied once to the embedding output: linscale_jax.models.tpe
(option model.cosformer2.tpe = "lightnet", the default: a d×e projection, a per-channel decay recurrence, the same
projection back, Table 1's d·e parameters; "lightnet_untied", separate projections (2·d·e);
"xmixers", the later per-head rank-1 module; "none").
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from linscale_jax.models import registry
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.decoder import Decoder
from linscale_jax.models.layers import KeyGen, Linear, LowRankGate, make_norm, merge_heads
from linscale_jax.models.linear_common import (init_cache, linear_attention_flops, lrpe_theta_init,
                                               make_short_conv, qkv_attention, short_conv_flops,
                                               short_conv_state_floats)
from linscale_jax.models.options import option
from linscale_jax.models.tpe import TPES, make_tpe


@dataclasses.dataclass(frozen=True)
class Cosformer2Options:
    """model.cosformer2: tpe lightnet (paper, d·e) | lightnet_untied | xmixers | none
    (linscale_jax.models.tpe)."""

    tpe: str = option("lightnet", choices=TPES, shape=True)


class Cosformer2Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        d, std = cfg.d_model, cfg.init_std
        self.wq = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wk = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wv = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.theta = nnx.Param(jnp.asarray(lrpe_theta_init(cfg.n_heads, d)), axes=("gain", "gain"))
        self.gate = LowRankGate(d, cfg.head_dim, keys=keys, std=std)
        self.wo = Linear(d, d, keys=keys, std=std, axes=("heads", "embed"))
        self.out_norm = make_norm(cfg, cfg.out_norm_eps)
        self.conv = make_short_conv(cfg, keys)
        self.cfg = cfg

    def __call__(self, x, *, positions, segment_ids, cache, extra):
        o, cache = qkv_attention(self.cfg, x, (self.wq, self.wk, self.wv), self.conv,
                                 positions=positions, segment_ids=segment_ids, cache=cache,
                                 log_decay=None, theta=self.theta[...])
        o = self.out_norm(merge_heads(o)) * self.gate(x)
        return self.wo(o), cache

    def init_cache(self, batch_size: int, max_len: int):
        return init_cache(self.cfg, batch_size, 2 * self.cfg.head_dim)


class Cosformer2(Decoder):
    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        super().__init__(cfg, keys=keys)
        self.tpe = make_tpe(cfg, keys)

    def embed_tokens(self, tokens, positions, segment_ids, cache):
        x = self.lookup(tokens)
        if self.tpe is None:
            return x, cache
        return self.tpe(x, segment_ids, cache)

    def init_embed_cache(self, batch_size: int):
        return None if self.tpe is None else self.tpe.init_cache(batch_size)


def _layer_flops(cfg, seq_len: int, chunk: int) -> float:
    """Linear attention with key dim 2e (LRPE), the low-rank output gate 2·2de and the short
    convolution 2·K·3d."""
    d, h, e = cfg.d_model, cfg.n_heads, cfg.head_dim
    return linear_attention_flops(h, 2 * e, e, chunk) + 2 * 2 * d * e + short_conv_flops(cfg)


def _once_flops(cfg, seq_len: int, chunk: int) -> float:
    """The TPE: lightnet (tied or not) 2·2de; xmixers the linear recurrence with k = e plus 2de;
    none 0."""
    d, h, e = cfg.d_model, cfg.n_heads, cfg.head_dim
    if cfg.cosformer2.tpe in ("lightnet", "lightnet_untied"):
        return 2 * 2 * d * e
    if cfg.cosformer2.tpe == "xmixers":
        return linear_attention_flops(h, e, e, chunk) + 2 * d * e
    return 0


registry.register(registry.ArchSpec(
    name="cosformer2", mixer=Cosformer2Attention, model=Cosformer2,
    paper_params_extra=lambda l, d, h: 2 * l * d * d // h + d * d // h,
    paper_flops_x=lambda d, h, n: 3 / (4 * h) + 23 / (72 * d),
    layer_flops=_layer_flops, once_flops=_once_flops, paper_layers={"410m": 25},
    state_floats=lambda cfg, n: (cfg.n_heads * 2 * cfg.head_dim * cfg.head_dim  # k = 2e (LRPE)
                                 + short_conv_state_floats(cfg)),
    options=Cosformer2Options))
