"""LLaMA: causal softmax attention with RoPE (theta = model.llama.rope_theta), RMSNorm, SwiGLU.

Legend: b batch, t sequence (queries), s keys, h heads, e = d/h head dim, d width.
Options (LlamaOptions, `--config.model.llama.<option>`): rope_theta, n_kv_heads.
W_q, W_k, W_v, W_o ∈ R^{d×d}; with model.llama.n_kv_heads < n_heads (converted checkpoints)
grouped-query attention, W_k, W_v ∈ R^{d×(n_kv_heads·e)}. RoPE uses the half-split (rotate-half) layout of HF
LLaMA, computed in float32. Packed documents (segment_ids) never attend across a change of id.
Decoding keeps a KV cache [b, max_len, n_kv_heads, e] per layer, written at the absolute position.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from linscale_jax.models import registry
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.decoder import Decoder, segment_starts
from linscale_jax.models.layers import KeyGen, Linear, merge_heads, split_heads, stacked_dense, unstack
from linscale_jax.models.options import option

_MASKED = -1e30


@dataclasses.dataclass(frozen=True)
class LlamaOptions:
    """model.llama: rope_theta, the RoPE base; n_kv_heads, grouped-query attention's key/value
    heads (0 = n_heads; converted checkpoints)."""

    rope_theta: float = option(10000.0, minimum=1.0)
    n_kv_heads: int = option(0, shape=True, minimum=0)

    def check(self, cfg) -> None:
        if self.n_kv_heads and cfg.n_heads % self.n_kv_heads:
            raise ValueError(f"model.llama.n_kv_heads={self.n_kv_heads} must divide model.n_heads="
                             f"{cfg.n_heads} (0 means n_kv_heads = n_heads).")
        if cfg.head_dim % 2:
            raise ValueError(f"llama: head dim d_model/n_heads = {cfg.head_dim} must be even for "
                             "RoPE; change model.n_heads.")


def kv_heads(cfg) -> int:
    """Key/value heads of llama attention (model.llama.n_kv_heads, 0 meaning n_heads)."""
    return cfg.llama.n_kv_heads or cfg.n_heads


def rope(x, positions, theta: float):
    """Rotary embedding. x [b,t,...,e] (e.g. [b,t,h,e], or q and k stacked [b,t,2,h,e]),
    positions [b,t] int -> the shape of x (dtype of x)."""
    e = x.shape[-1]
    inv_freq = theta ** (-jnp.arange(0, e, 2, dtype=jnp.float32) / e)  # [e/2]
    ang = positions.astype(jnp.float32)[:, :, None] * inv_freq  # [b,t,e/2]
    bcast = ang.shape[:2] + (1,) * (x.ndim - 3) + (e,)
    cos = jnp.concatenate([jnp.cos(ang)] * 2, -1).reshape(bcast)
    sin = jnp.concatenate([jnp.sin(ang)] * 2, -1).reshape(bcast)
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


def query_block(t: int) -> int:
    """causal_attention's default block of queries for length t: 8 blocks, but none under 64
    queries, whose dots are too thin to pay for their own ops (docs/results.md, "CPU train-step
    choices")."""
    return min(max(-(-t // 8), 64), t)


# Per backend: about how many (query, key) logits one group of (batch, head) pairs of
# causal_attention may hold, counted as pairs x t x t. On CPU the attention is bound by memory
# traffic: the whole batch's float32 logits (42 MB a layer for llama-d256's 8 x 32 heads at t = 256)
# pass through DRAM about ten times a step. Groups of 2^21 (8 MiB, inside a 32 MiB L3),
# recomputed in the backward, make llama-d256's train step faster than one whole-batch group
# (`python bench/llama_attention.py` times both side by side). TPU and GPU: one group (None), no recomputation.
GROUP_LOGITS = {"cpu": 2**21, "tpu": None, "gpu": None}


def attention_groups(b: int, h: int, t: int, backend: str | None = None) -> tuple[int, int]:
    """How `causal_attention` splits q [b, t, h, e] into groups walked one after another: (groups of
    batch rows, groups of heads). Enough groups that one holds about GROUP_LOGITS[backend] logits,
    batch rows first (one row's heads share its document mask); each count divides the rows or
    heads on one device of the mesh traced under (if any), so every group keeps that sharding."""
    budget = GROUP_LOGITS.get(backend or jax.default_backend(), GROUP_LOGITS["cpu"])
    if budget is None:
        return 1, 1
    mesh = jax.sharding.get_abstract_mesh()
    shape = {} if mesh is None or mesh.empty else dict(mesh.shape)
    rows, tensor = shape.get("data", 1) * shape.get("fsdp", 1), shape.get("tensor", 1)
    b_local = b // rows if b % rows == 0 else b
    h_local = h // tensor if h % tensor == 0 else h
    most = max(1, b_local * h_local * t * t // budget)

    def largest_divisor(n, cap):
        return max(g for g in range(1, n + 1) if n % g == 0 and g <= cap)

    gb = largest_divisor(b_local, most)
    return gb, largest_divisor(h_local, max(1, most // gb))


def _blocked_attention(q, k, v, starts, block: int):
    """q (scaled), k, v [b, g, t, e] (g heads of one group), starts [b, t] | None -> o [b, g, t, e].
    Queries [i, i + block) see keys [max(i, start), i + block) only: logits over keys no query of the
    block sees are never formed."""
    t = q.shape[2]
    outs = []
    for i in range(0, t, block):
        j = min(i + block, t)  # queries [i, j) see keys [0, j)
        logits = jnp.einsum("bhte,bhse->bhts", q[:, :, i:j], k[:, :, :j],
                            preferred_element_type=jnp.float32)
        mask = np.arange(i, j)[:, None] >= np.arange(j)[None, :]  # [t_blk, s] (static)
        if starts is not None:  # a per-row lower bound on the key: one compare per logit
            mask = mask & (np.arange(j) >= starts[:, None, i:j, None])
        logits = jnp.where(mask, logits, _MASKED)
        p = jnp.exp(logits - jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True)))
        denom = jnp.sum(p, axis=-1, keepdims=True)  # [b, g, t_blk, 1] >= 1 (diagonal visible)
        o = jnp.einsum("bhts,bhse->bhte", p.astype(v.dtype), v[:, :, :j])
        outs.append(o / denom.astype(o.dtype))
    return jnp.concatenate(outs, axis=2)


def causal_attention(q, k, v, segment_ids, block: int | None = None,
                     groups: tuple[int, int] | None = None):
    """Training-form causal softmax attention, by blocks of queries and groups of (batch, head)
    pairs. q [b,t,h,e], k/v [b,t,h_kv,e], segment_ids [b,t] | None -> o [b,t,h,e]. Logits and
    softmax in float32. A packed document (a run of one segment id) sees only its own keys.

    Blocks: the queries of block [i, i + block) see keys [0, i + block) only, so the logits,
    exponentials and probability gradients over keys no query may see (about half of the full
    t x t form) are never formed; with n = t/block blocks (n + 1)/2n of the t x t entries remain
    (5/8 for the 4 blocks of 64 at t = 256, 3/4 for the 2 blocks of 64 at t = 128). The softmax is
    normalized after the PV product (o = (exp(l - max) V) / Σ exp(l - max), the max held constant):
    the division touches [t, e] values per head instead of [t, t].

    Groups (gb, gh) (`attention_groups`, per backend): batch rows a·gb + i and heads c·gh + j form
    group (i, j); the groups run one after another (`lax.map`) and each is recomputed in the
    backward (`jax.checkpoint`), so on CPU one group's logits stay in cache instead of the whole
    batch's passing through memory. (1, 1): one group, nothing recomputed.

    Equal to `softmax_attention` with the causal and same-document mask, values and gradients
    (tests/models/test_models_arch.py)."""
    b, t, h, e = q.shape
    rep = h // k.shape[2]
    if rep > 1:
        k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    block = block or query_block(t)
    gb, gh = groups or attention_groups(b, h, t)
    starts = None if segment_ids is None else segment_starts(segment_ids)
    ba, ha = b // gb, h // gh

    def grouped(x):  # [b, t, h, e] -> [gb·gh, b/gb, h/gh, t, e]
        x = jnp.transpose(x.reshape(ba, gb, t, ha, gh, e), (1, 4, 0, 3, 2, 5))
        return x.reshape(gb * gh, ba, ha, t, e)

    q, k, v = (grouped(x) for x in (q * jnp.asarray(e**-0.5, q.dtype), k, v))
    if starts is not None:  # [b, t] -> [gb·gh, b/gb, t]
        starts = jnp.broadcast_to(jnp.swapaxes(starts.reshape(ba, gb, t), 0, 1)[:, None],
                                  (gb, gh, ba, t)).reshape(gb * gh, ba, t)
    if gb * gh == 1:
        o = _blocked_attention(q[0], k[0], v[0], None if starts is None else starts[0], block)[None]
    else:
        o = jax.lax.map(jax.checkpoint(lambda xs: _blocked_attention(*xs, block)), (q, k, v, starts))
    o = o.reshape(gb, gh, ba, ha, t, e)
    return jnp.transpose(o, (2, 0, 4, 3, 1, 5)).reshape(b, t, h, e)


class LlamaAttention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        d, std = cfg.d_model, cfg.init_std
        kv = kv_heads(cfg) * cfg.head_dim
        self.wq = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wk = Linear(d, kv, keys=keys, std=std, axes=("embed", "heads"))
        self.wv = Linear(d, kv, keys=keys, std=std, axes=("embed", "heads"))
        self.wo = Linear(d, d, keys=keys, std=std, axes=("heads", "embed"))
        self.n_heads = cfg.n_heads
        self.n_kv_heads = kv_heads(cfg)
        self.theta = cfg.llama.rope_theta
        self.cache_dtype = cfg.dtype

    def __call__(self, x, *, positions, segment_ids, cache, extra):
        b, t, d = x.shape
        if self.n_kv_heads == self.n_heads:  # q, k, v as one matmul, RoPE on q and k at once
            qk, v = jnp.split(stacked_dense(x, (self.wq, self.wk, self.wv)).reshape(
                b, t, 3, self.n_heads, -1), [2], axis=2)
            (q, k), v = unstack(rope(qk, positions, self.theta), 2), jnp.squeeze(v, 2)
        else:  # grouped-query attention (converted checkpoints): narrower k, v
            q = rope(split_heads(self.wq(x), self.n_heads), positions, self.theta)
            k = rope(split_heads(self.wk(x), self.n_kv_heads), positions, self.theta)
            v = split_heads(self.wv(x), self.n_kv_heads)
        if cache is None:
            o = causal_attention(q, k, v, segment_ids)
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
    return -2 * 2 * d * (h - kv_heads(cfg)) * e + 2 * 2 * d * (seq_len + 1) / 2


registry.register(registry.ArchSpec(
    name="llama", mixer=LlamaAttention, model=Llama,
    paper_params_extra=lambda l, d, h: 0,
    paper_flops_x=lambda d, h, n: n / (6 * d) + 5 / (18 * d),
    layer_flops=_layer_flops, softmax_block=True,
    state_floats=lambda cfg, n: 2 * kv_heads(cfg) * cfg.head_dim * n,  # KV cache: 2·d·n
    options=LlamaOptions))
