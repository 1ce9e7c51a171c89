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

TPE (model.tpe = "recurrence"; "none" disables it), applied once to the embedding output, following
LightNet's Tpe (arXiv 2405.21022; the authors' reference module in Doraemonzzz/xmixers, `pes/tpe.py`):
    per head i, with learnable vectors q, k ∈ R^d (split [h, e]) and a per-head decay
    λ_i = sigmoid(a_i):      S_t = λ_i S_{t-1} + k_iᵀ x_{t,i},   u_{t,i} = q_i S_t
    i.e. u_{t,i} = (q_i·k_i) Σ_{s<=t} λ_i^{t-s} x_{s,i}: a learnable causal Toeplitz matrix per head,
    computed with the linear-attention recurrence (state e×e per head). Then a per-head
    SimpleRMSNorm and a projection back, and the result replaces the embedding (as in LightNet).
    Choice documented here: LightNet's output projection is a full d×d matrix; the scaling-law paper
    counts d·e TPE parameters, so the projection back is per head (block diagonal, h blocks of e×e =
    d·e parameters). Extra small parameters: q, k (2d) and a (h). Init: q, k, a ~ N(0, 1) as in
    LightNet, the blocks ~ N(0, init_std).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from linscale_jax.models.config import ModelConfig
from linscale_jax.models.decoder import Decoder
from linscale_jax.models.layers import (KeyGen, Linear, LowRankGate, make_norm, merge_heads,
                                        normal_param, simple_rms_norm, split_heads)
from linscale_jax.models.linear_common import (lrpe, lrpe_theta_init, run_linear_attention,
                                               zero_state)


class Cosformer2Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        d, std = cfg.d_model, cfg.init_std
        self.wq = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wk = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wv = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.theta = nnx.Param(jnp.asarray(lrpe_theta_init(cfg.n_heads, d)), axes=(None, None))
        self.gate = LowRankGate(d, cfg.head_dim, keys=keys, std=std)
        self.wo = Linear(d, d, keys=keys, std=std, axes=("heads", "embed"))
        self.out_norm = make_norm(cfg, cfg.out_norm_eps)
        self.cfg = cfg

    def __call__(self, x, *, positions, segment_ids, cache, extra):
        h = self.cfg.n_heads
        theta = self.theta[...]
        q = lrpe(jax.nn.silu(split_heads(self.wq(x), h)), positions, theta)
        k = lrpe(jax.nn.silu(split_heads(self.wk(x), h)), positions, theta)
        v = split_heads(self.wv(x), h)
        o, cache = run_linear_attention(self.cfg, q, k, v, None, segment_ids, cache)
        o = self.out_norm(merge_heads(o)) * self.gate(x)
        return self.wo(o), cache

    def init_cache(self, batch_size: int, max_len: int):
        e = self.cfg.head_dim
        return zero_state(batch_size, self.cfg.n_heads, 2 * e, e)


class TPE(nnx.Module):
    """Toeplitz positional encoding on the embedding output: x [b,t,d] -> [b,t,d] (see module doc)."""

    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        h, e = cfg.n_heads, cfg.head_dim
        self.q = nnx.Param(jax.random.normal(keys(), (h, e), jnp.float32), axes=(None, None))
        self.k = nnx.Param(jax.random.normal(keys(), (h, e), jnp.float32), axes=(None, None))
        self.decay_logit = nnx.Param(jax.random.normal(keys(), (h,), jnp.float32), axes=(None,))
        self.proj = normal_param(keys, (h, e, e), cfg.init_std, (None, None, None))
        self.cfg = cfg

    def __call__(self, x, segment_ids, cache):
        b, t, d = x.shape
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


class Cosformer2(Decoder):
    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        super().__init__(cfg, keys=keys)
        self.tpe = TPE(cfg, keys=keys) if cfg.tpe == "recurrence" else None

    def make_mixer(self, cfg, keys):
        return Cosformer2Attention(cfg, keys=keys)

    def embed_tokens(self, tokens, positions, segment_ids, cache):
        x = self.lookup(tokens)
        if self.tpe is None:
            return x, cache
        return self.tpe(x, segment_ids, cache)

    def init_embed_cache(self, batch_size: int):
        return None if self.tpe is None else self.tpe.init_cache(batch_size)
