"""plainlin: a fifth architecture in one file, a plain causal linear attention (no gate, no decay, no
positional encoding). tests/models/test_registry.py registers it in-process, and copies this file
into a copy of linscale_jax/models/ to show that the package discovers it with no other file changed.
"""

from __future__ import annotations

import jax
from flax import nnx

from linscale_jax.models import registry
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.layers import KeyGen, Linear, make_norm, merge_heads, split_heads
from linscale_jax.models.linear_common import linear_attention_flops, run_linear_attention, zero_state


class PlainLinearAttention(nnx.Module):
    """Q = elu(X̄ W_q) + 1, K = elu(X̄ W_k) + 1, V = X̄ W_v; S_t = S_{t-1} + k_tᵀ v_t, o_t = q_t S_t
    (per head, no decay); output SimpleRMSNorm(concat_heads(o)) W_o. x [b,t,d] -> [b,t,d]."""

    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        d, std = cfg.d_model, cfg.init_std
        self.wq = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wk = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wv = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wo = Linear(d, d, keys=keys, std=std, axes=("heads", "embed"))
        self.out_norm = make_norm(cfg, cfg.out_norm_eps)
        self.cfg = cfg

    def __call__(self, x, *, positions, segment_ids, cache, extra):
        h = self.cfg.n_heads
        q = jax.nn.elu(split_heads(self.wq(x), h)) + 1
        k = jax.nn.elu(split_heads(self.wk(x), h)) + 1
        v = split_heads(self.wv(x), h)
        o, cache = run_linear_attention(self.cfg, q, k, v, None, segment_ids, cache)  # no decay
        return self.wo(self.out_norm(merge_heads(o))), cache

    def init_cache(self, batch_size: int, max_len: int):
        e = self.cfg.head_dim
        return zero_state(batch_size, self.cfg.n_heads, e, e)


PLAIN = registry.ArchSpec(
    name="plainlin",
    mixer=PlainLinearAttention,  # model=None: the plain Decoder builds this mixer in every block
    # Table 1: q, k, v, o and the GLU are the 12·l·d² (nothing else); x: HGRN2's k = e state term
    # 1/(3h) with the llama/TNL subleading 5/(18d).
    paper_params_layer=lambda cfg: 0,
    paper_flops_x=lambda cfg, n: 1 / (3 * cfg.n_heads) + 5 / (18 * cfg.d_model),
    layer_flops=lambda cfg, n, chunk: linear_attention_flops(cfg.n_heads, cfg.head_dim,
                                                             cfg.head_dim, chunk),
)

registry.register(PLAIN)
