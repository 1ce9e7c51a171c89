"""Parameter and FLOP accounting: one source of truth for MFU, the paper's compute and the fits.

Legend: l layers, d width, h heads, e = d/h head dim, g GLU width, v vocab, n sequence length,
C chunk length of the chunked linear attention, D tokens.

Two definitions, kept separate on purpose:

* paper (notes §5, Table 1) -- embeddings and subleading terms excluded, softmax attention counted
  without causal halving, g taken as 8d/3:
      N:  llama 12ld² | tnl 12ld² + 2ld²/h | hgrn2 12ld² + ld | cosformer2 12ld² + 2ld²/h + d²/h
      C/D = 72·l·d²·(1 + x) with x = llama n/(6d) + 5/(18d) | tnl 1/(2h) + 5/(18d)
            | hgrn2 1/(3h) + 29/(72d) | cosformer2 3/(4h) + 23/(72d)
  `paper_params`, `paper_flops_per_token`; C in PFLOP/s-days is C / PF_DAY. Each architecture's
  terms (N beyond 12ld², x) come from its registry entry (linscale_jax.models.registry). A linear
  mixer's short convolution (model.short_conv = K; off in the paper) adds its l·3Kd parameters to
  N and 6·l·3Kd to C/D.

* exact -- `flops_per_token_exact`: training FLOPs per token of the real model = 3 × forward
  (backward = 2 × forward), 2 FLOPs per multiply-add, matmuls only (norms, activations, decays,
  softmax exponentials and other elementwise work are not counted). Forward per token:
      per layer   projections  2·4d²  (q, k, v, o; HGRN2: q, f, i, o)
                  GLU          2·3dg  (actual g)
                  gate         2·2d·e (tnl, cosformer2: low-rank output gate, rank e)
                  short conv   2·K·3d (model.short_conv = K > 0: depthwise, K taps on q, k, v)
                  mixer        llama: causal softmax, QKᵀ and PV over the (n+1)/2 keys a token sees
                                      on average: 2·2·d·(n+1)/2
                               linear (chunked, chunk c = min(C, n)), per head with key dim k and
                                      value dim e: intra-chunk QKᵀ and PV over the full c×c block
                                      2c(k + e), inter-chunk read q S 2ke and state update kᵀv 2ke;
                                      k = e (tnl, hgrn2), k = 2e (cosformer2, LRPE doubles it)
      once        LM head 2dv (the tied embedding lookup is free)
                  cosformer2 TPE (model.tpe): lightnet 2·2de (up- and down-projection; the
                                      per-channel recurrence is elementwise), the paper's 4nde;
                                      xmixers: the linear recurrence with k = e plus 2de
  The shared terms (projections, GLU, LM head) are counted here; each architecture's own terms
  (mixer, gate, GQA, TPE) come from its registry entry (`layer_flops`, `once_flops`) in its module.
  The tied embedding (and an untied `lm_head`, model.tie_embeddings=False) counts as "embedding" in
  `param_counts`, everything else as non-embedding. The released-checkpoint switches are counted too:
  grouped-query llama (k, v projections d·n_kv_heads·e), tnl_gate=linear (2d² instead of 2·2de),
  tnl_lrpe (key dim 2e).
  Checked against XLA's cost analysis of the compiled forward (tests/models/test_accounting.py): within a
  few % for llama (adding the query-block × key-prefix pairs XLA evaluates), tnl and cosformer2; the
  `xla` form of HGRN2 does ~15% more work than counted here (secondary chunking of the
  data-dependent decay) -- the count is the algorithm's, not one implementation's.
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
