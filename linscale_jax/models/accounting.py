"""Parameter and FLOP accounting: one source of truth for MFU, the paper's compute and the fits.

    param_counts(cfg)                    {"total", "embedding", "non_embedding"} from the real tree
    paper_params(cfg)                    the paper's N (Table 1: embeddings and subleading terms out)
    paper_flops_per_token(cfg, n)        the paper's C/D (softmax without causal halving, g = 8d/3)
    flops_per_token_exact(cfg, n)        training FLOPs per token of the real model (3 x forward,
                                         matmuls only, actual g, embeddings and LM head, causal
                                         halving, the chunked linear attention's own cost)
    summary(cfg, n)                      all of them for one config (`describe`)

cfg: a ModelConfig (or a config's model section); n: sequence length. C in PFLOP/s-days is
C / PF_DAY. The shared terms (projections, GLU, LM head) are counted here; each architecture's own
terms (mixer, gate, GQA, TPE, the short convolution, the paper's N and x) come from its registry
entry; a linear mixer's short convolution (model.short_conv) adds its parameters to the paper's N
and six times them to its C/D. The formulas and how they are checked: docs/models.md, "The two
FLOP counts".
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from flax import nnx

from linscale_jax import contract
from linscale_jax.models import ModelConfig, build_model, registry
from linscale_jax.models.linear_common import short_conv_params

PF_DAY = contract.PF_DAY  # FLOPs in one PFLOP/s-day


def _model_config(cfg):
    return cfg if isinstance(cfg, ModelConfig) else ModelConfig.from_config(cfg)


def _spec(cfg):
    return registry.get(cfg.arch)


def param_counts(cfg) -> dict:
    """{"total", "embedding", "non_embedding"} counted from the real parameter tree (abstractly,
    with nnx.eval_shape: a 7B config allocates nothing)."""
    return dict(_param_counts(_model_config(cfg)))


@functools.lru_cache(maxsize=256)
def _param_counts(cfg) -> tuple:
    abstract = nnx.eval_shape(lambda: build_model(cfg, nnx.Rngs(0)))
    params = nnx.state(abstract, nnx.Param)
    total = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    embedding = int(np.prod(abstract.embed.embedding.shape))
    if abstract.lm_head is not None:  # untied output embedding (converted checkpoints)
        embedding += int(np.prod(abstract.lm_head.kernel.shape))
    return (("total", total), ("embedding", embedding), ("non_embedding", total - embedding))


def paper_params(cfg) -> int:
    """Table-1 N (non-embedding, leading terms)."""
    cfg = _model_config(cfg)
    l, d, h = cfg.n_layers, cfg.d_model, cfg.n_heads
    return 12 * l * d * d + _spec(cfg).paper_params_extra(l, d, h) + short_conv_params(cfg)


def paper_flops_per_token(cfg, seq_len: int) -> float:
    """Table-1 C / D at sequence length n = seq_len."""
    cfg = _model_config(cfg)
    l, d, h, n = cfg.n_layers, cfg.d_model, cfg.n_heads, seq_len
    x = _spec(cfg).paper_flops_x(d, h, n)
    return 72.0 * l * d * d * (1.0 + x) + 6 * short_conv_params(cfg)


def forward_flops_per_token(cfg, seq_len: int) -> float:
    """Exact forward FLOPs per token (matmuls, 2 per multiply-add)."""
    cfg = _model_config(cfg)
    l, d, g, v = cfg.n_layers, cfg.d_model, cfg.ffn_dim, cfg.vocab_size
    spec = _spec(cfg)
    chunk = min(cfg.resolved_chunk_size, seq_len)
    layer = 2 * 4 * d * d + 2 * 3 * d * g + spec.layer_flops(cfg, seq_len, chunk)
    once = 2 * d * v + spec.once_flops(cfg, seq_len, chunk)
    return float(l * layer + once)


def flops_per_token_exact(cfg, seq_len: int) -> float:
    """Exact training FLOPs per token (forward + backward = 3 × forward); use for MFU."""
    return 3.0 * forward_flops_per_token(cfg, seq_len)


def summary(cfg, seq_len: int) -> dict:
    """The describe row: shape, parameter counts and both FLOP definitions."""
    cfg = _model_config(cfg)
    counts = param_counts(cfg)
    return {
        "arch": cfg.arch,
        "size": cfg.size,
        "n_layers": cfg.n_layers,
        "d_model": cfg.d_model,
        "n_heads": cfg.n_heads,
        "head_dim": cfg.head_dim,
        "ffn_dim": cfg.ffn_dim,
        "vocab_size": cfg.vocab_size,
        "params_total": counts["total"],
        "params_embedding": counts["embedding"],
        "params_non_embedding": counts["non_embedding"],
        "paper_params": paper_params(cfg),
        "paper_flops_per_token": paper_flops_per_token(cfg, seq_len),
        "flops_per_token_exact": flops_per_token_exact(cfg, seq_len),
    }
