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
and six times them to its C/D. A hybrid stack (model.layers) sums every layer's terms from its own
architecture's entry. The formulas and how they are checked: docs/models.md, "The two FLOP counts".

    state_floats_per_layer(cfg, n)       decoding state per layer for one sequence (mean over layers)
    kv_cache_bytes_per_token(cfg)        bytes the softmax layers' KV caches grow per token
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from flax import nnx

from linscale_jax import contract
from linscale_jax.models import ModelConfig, build_model, registry
from linscale_jax.models.linear_common import short_conv_layer_params

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


def layer_counts(cfg) -> dict[str, int]:
    """{arch: its number of layers} (one entry for a model of one arch; a hybrid stack's per arch)."""
    kinds = _model_config(cfg).layer_archs
    return {a: kinds.count(a) for a in dict.fromkeys(kinds)}


def _per_arch(cfg):
    """(arch, its layer count, its pure config, its ArchSpec) for every arch of the stack."""
    cfg = _model_config(cfg)
    return [(a, n, cfg.pure(a), registry.get(a)) for a, n in layer_counts(cfg).items()]


def paper_params(cfg) -> int:
    """Table-1 N (non-embedding, leading terms): per layer 12·d² + its arch's term, plus
    model.arch's once-only terms and the linear layers' short convolutions."""
    cfg = _model_config(cfg)
    d = cfg.d_model
    layers = sum(n * (12 * d * d + spec.paper_params_layer(pure) + short_conv_layer_params(pure))
                 for _, n, pure, spec in _per_arch(cfg))
    return layers + _spec(cfg).paper_params_once(cfg.pure(cfg.arch))


def paper_flops_per_token(cfg, seq_len: int) -> float:
    """Table-1 C / D at sequence length n = seq_len: per layer 72·d²·(1 + x) of its arch, plus six
    times the linear layers' short-convolution parameters."""
    cfg = _model_config(cfg)
    d = cfg.d_model
    return float(sum(n * 72.0 * d * d * (1.0 + spec.paper_flops_x(pure, seq_len))
                     + 6 * n * short_conv_layer_params(pure) for _, n, pure, spec in _per_arch(cfg)))


def forward_flops_per_token(cfg, seq_len: int) -> float:
    """Exact forward FLOPs per token (matmuls, 2 per multiply-add)."""
    cfg = _model_config(cfg)
    d, g, v = cfg.d_model, cfg.ffn_dim, cfg.vocab_size
    chunk = min(cfg.resolved_chunk_size, seq_len)
    layers = sum(n * (2 * 4 * d * d + 2 * 3 * d * g + spec.layer_flops(pure, seq_len, chunk))
                 for _, n, pure, spec in _per_arch(cfg))
    once = 2 * d * v + _spec(cfg).once_flops(cfg.pure(cfg.arch), seq_len, chunk)
    return float(layers + once)


def state_floats_per_layer(cfg, seq_len: int) -> float:
    """Floats of the decoding state for one sequence of seq_len tokens, averaged over the layers
    (ArchSpec.state_floats of each layer's arch: a linear layer's fixed state, a softmax layer's
    KV cache at seq_len tokens)."""
    parts = _per_arch(cfg)
    return sum(n * spec.state_floats(pure, seq_len) for _, n, pure, spec in parts) / \
        sum(n for _, n, _, _ in parts)


def kv_cache_bytes_per_token(cfg) -> int:
    """Bytes the KV caches of all softmax layers add per decoded token for one sequence: 2 (k and v)
    · key/value heads · e · the cache dtype's bytes (model.dtype), summed over those layers; 0
    for a model of linear layers only (its state does not grow)."""
    import numpy as np

    total = 0
    for _, n, pure, spec in _per_arch(cfg):
        if spec.softmax_block:
            per_token = spec.state_floats(pure, 2) - spec.state_floats(pure, 1)
            total += n * per_token * np.dtype(pure.dtype).itemsize
    return int(total)


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
