"""LLaMA: causal softmax attention with RoPE (theta = model.rope_theta), RMSNorm, SwiGLU.

Legend: b batch, t sequence (queries), s keys, h heads, e = d/h head dim, d width.
W_q, W_k, W_v, W_o ∈ R^{d×d}; with model.n_kv_heads < n_heads (converted checkpoints) grouped-query
attention, W_k, W_v ∈ R^{d×(n_kv_heads·e)}. RoPE uses the half-split (rotate-half) layout of HF
LLaMA, computed in float32. Packed documents (segment_ids) never attend across a change of id.
Decoding keeps a KV cache [b, max_len, n_kv_heads, e] per layer, written at the absolute position.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from linscale_jax.models import registry
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.decoder import Decoder
from linscale_jax.models.layers import KeyGen, Linear, merge_heads, split_heads

_MASKED = -1e30


def rope(x, positions, theta: float):
    """Rotary embedding. x [b,t,h,e], positions [b,t] int -> [b,t,h,e] (dtype of x)."""
    e = x.shape[-1]
    inv_freq = theta ** (-jnp.arange(0, e, 2, dtype=jnp.float32) / e)  # [e/2]
    ang = positions.astype(jnp.float32)[:, :, None] * inv_freq  # [b,t,e/2]
    cos = jnp.concatenate([jnp.cos(ang)] * 2, -1)[:, :, None, :]
    sin = jnp.concatenate([jnp.sin(ang)] * 2, -1)[:, :, None, :]
    xf = x.astype(jnp.float32)
    x1, x2 = jnp.split(xf, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return (xf * cos + rotated * sin).astype(x.dtype)


def softmax_attention(q, k, v, mask):
    """q [b,t,h,e], k/v [b,s,h_kv,e] (h_kv divides h), mask [b,t,s] bool -> o [b,t,h,e];
    logits/softmax in float32."""
    rep = q.shape[2] // k.shape[2]
    if rep > 1:  # grouped-query attention: each key/value head serves `rep` query heads
        k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    scale = q.shape[-1] ** -0.5
    logits = jnp.einsum("bthe,bshe->bhts", q, k, preferred_element_type=jnp.float32) * scale
    logits = jnp.where(mask[:, None], logits, _MASKED)
    probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    return jnp.einsum("bhts,bshe->bthe", probs, v)


class LlamaAttention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        d, std = cfg.d_model, cfg.init_std
        kv = cfg.kv_heads * cfg.head_dim
        self.wq = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wk = Linear(d, kv, keys=keys, std=std, axes=("embed", "heads"))
        self.wv = Linear(d, kv, keys=keys, std=std, axes=("embed", "heads"))
        self.wo = Linear(d, d, keys=keys, std=std, axes=("heads", "embed"))
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.kv_heads
        self.theta = cfg.rope_theta
        self.cache_dtype = cfg.dtype

    def __call__(self, x, *, positions, segment_ids, cache, extra):
        b, t, _ = x.shape
        q = rope(split_heads(self.wq(x), self.n_heads), positions, self.theta)
        k = rope(split_heads(self.wk(x), self.n_kv_heads), positions, self.theta)
        v = split_heads(self.wv(x), self.n_kv_heads)
        if cache is None:
            idx = jnp.arange(t)
            mask = jnp.broadcast_to(idx[None, :, None] >= idx[None, None, :], (b, t, t))
            if segment_ids is not None:
                mask = mask & (segment_ids[:, :, None] == segment_ids[:, None, :])
            o = softmax_attention(q, k, v, mask)
        else:
            start = positions[0, 0]
            kc = jax.lax.dynamic_update_slice(cache["k"], k.astype(cache["k"].dtype), (0, start, 0, 0))
            vc = jax.lax.dynamic_update_slice(cache["v"], v.astype(cache["v"].dtype), (0, start, 0, 0))
            key_idx = jnp.arange(kc.shape[1])
            mask = key_idx[None, None, :] <= positions[:, :, None]  # [b,t,s]
            o = softmax_attention(q, kc.astype(q.dtype), vc.astype(q.dtype), mask)
            cache = {"k": kc, "v": vc}
        return self.wo(merge_heads(o)), cache

    def init_cache(self, batch_size: int, max_len: int):
        e = self.wq.kernel.shape[-1] // self.n_heads
        shape = (batch_size, max_len, self.n_kv_heads, e)
        return {"k": jnp.zeros(shape, self.cache_dtype), "v": jnp.zeros(shape, self.cache_dtype)}


class Llama(Decoder):
    def extend(self, tokens, state):
        cache = state["layers"] if self.cfg.scan_layers else state["layers"][0]
        cap = cache["k"].shape[-3]
        pos = state["pos"]
        if not isinstance(pos, jax.core.Tracer) and int(pos) + tokens.shape[-1] > cap:
            raise ValueError(
                f"extend: the KV cache holds {cap} tokens but position {int(pos)} + "
                f"{tokens.shape[-1]} new tokens exceeds it; call init_state with a larger max_len."
            )
        return super().extend(tokens, state)


def _layer_flops(cfg, seq_len: int, chunk: int) -> float:
    """Grouped-query k, v projections (fewer than 2·2d²) and causal softmax QKᵀ, PV over the
    (n+1)/2 keys a token sees on average."""
    d, h, e = cfg.d_model, cfg.n_heads, cfg.head_dim
    return -2 * 2 * d * (h - cfg.kv_heads) * e + 2 * 2 * d * (seq_len + 1) / 2


registry.register(registry.ArchSpec(
    name="llama", mixer=LlamaAttention, model=Llama,
    paper_params_extra=lambda l, d, h: 0,
    paper_flops_x=lambda d, h, n: n / (6 * d) + 5 / (18 * d),
    layer_flops=_layer_flops, softmax_block=True))
