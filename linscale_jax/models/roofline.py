"""Roofline of one training step on a TPU generation, on paper: per kernel and per step, FLOPs, HBM
bytes, arithmetic intensity, the roofline time on the chip and the MFU it implies.

    step_roofline(cfg, gen, batch, seq_len) -> {"rows": [...], "step": {...}}

Rows (every one a forward + backward total over the step's batch x seq_len tokens, bf16 activations):
    token mixer      linear archs: the Pallas kernels (forward, intra, dq sweep, reverse sweep; their
                     pl.CostEstimate at the generation's blocks, config.TPU_BLOCKS, with segments);
                     llama: causal softmax attention as a flash kernel (kernels_pallas roofline)
    dense matmuls    every weight matrix of the model (q, k, v, o / gates, GLU, LM head = the tied
                     embedding): 3 matmuls (forward, dx, dW) of [tokens, d_in] x [d_in, d_out]:
                     6·tokens·d_in·d_out FLOPs; bytes: x read twice, y written and dy read twice,
                     dx written (bf16), the weight read twice (bf16) and dW written (f32)
    optimizer        AdamW on every parameter: f32 parameter, m and v read and written, the f32
                     gradient read (28 bytes a parameter; elementwise, no matmul FLOPs)
Elementwise work between them (norms, activations, the decay and gate computations, the loss) is not
modelled: the rows are the step's matmul kernels and its largest memory sweep.

Step: time = Σ row times (each row at its own roofline, no overlap between rows); useful FLOPs =
linscale_jax accounting's exact training FLOPs (`flops_per_token_exact` x tokens, at the kernel's
chunk), so MFU bound = useful FLOPs / (peak x time). `bound_by` names the row with the largest time;
`memory_limited_by` the memory-bound row that adds the most time beyond its FLOPs at peak
(`memory_excess_s`; None when every row is compute-bound).
Times are chip-seconds: divide by the number of chips for the step time of a data-parallel run.
"""

from __future__ import annotations

import collections
import math

import jax
from flax import nnx

from kernels_pallas.linear_attention import roofline as kr
from kernels_pallas.linear_attention.config import TPU_BLOCKS
from kernels_pallas.linear_attention.kind import DecayKind
from kernels_pallas.tpu import TpuGeneration
from linscale_jax.models import accounting
from linscale_jax.models import ModelConfig, build_model

# The token mixer's kernel per architecture: decay kind and key dim (in head dims e).
LINEAR_MIXERS = {"tnl": (DecayKind.HEAD, 1), "hgrn2": (DecayKind.DATA, 1),
                 "cosformer2": (DecayKind.NONE, 2)}
SOFTMAX = ("llama",)
ADAMW_BYTES_PER_PARAM = 28


def _cfg(cfg, gen: TpuGeneration) -> ModelConfig:
    cfg = cfg if isinstance(cfg, ModelConfig) else ModelConfig.from_config(cfg)
    return cfg.replace(dtype="bfloat16", impl="pallas", chunk_size=TPU_BLOCKS[gen.name].chunk_size)


def mixer_costs(cfg: ModelConfig, gen: TpuGeneration, batch: int, seq_len: int) -> list:
    """The token mixer's kernel costs over all layers and the batch."""
    h, e, layers = cfg.n_heads, cfg.head_dim, cfg.n_layers
    if cfg.arch in SOFTMAX:
        per = kr.flash_attention_costs(1, seq_len, h, e)
    elif cfg.arch in LINEAR_MIXERS:
        kind, kmul = LINEAR_MIXERS[cfg.arch]
        if cfg.arch == "tnl" and cfg.tnl.lrpe:
            kmul = 2
        per = kr.linear_attention_costs(kind, 1, seq_len, h, kmul * e, e, blocks=TPU_BLOCKS[gen.name])
    else:
        raise ValueError(f"roofline: no token-mixer kernel model for arch {cfg.arch!r}; add it to "
                         "LINEAR_MIXERS (decay kind, key dim / head dim) or SOFTMAX.")
    return [c * (batch * layers) for c in per]


def weight_matrices(cfg: ModelConfig) -> dict:
    """{group: [(d_in, d_out, count)]}: every weight matrix of the model, grouped by the name of
    its module (mixer, mlp, lm_head = the tied embedding or an untied head)."""
    abstract = nnx.eval_shape(lambda: build_model(cfg, nnx.Rngs(0)))
    groups = collections.defaultdict(list)
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(abstract, nnx.Param)):
        keys = [str(getattr(p, "key", getattr(p, "name", p))) for p in path]
        if keys[-1] == "value":
            keys = keys[:-1]
        if keys[-1] not in ("kernel", "embedding") or leaf.ndim < 2:  # gains, biases, bounds
            continue
        if keys[0] in ("embed", "lm_head"):
            vocab, d = leaf.shape if keys[0] == "embed" else leaf.shape[::-1]
            groups["lm_head"].append((d, vocab, 1))
            continue
        group = next((k for k in keys if k in ("mixer", "mlp")), keys[0])
        *lead, d_in, d_out = leaf.shape
        groups[group].append((d_in, d_out, math.prod(lead)))
    return dict(groups)


def dense_costs(cfg: ModelConfig, tokens: int) -> list:
    out = []
    for group, mats in weight_matrices(cfg).items():
        flops = sum(6 * tokens * i * o * n for i, o, n in mats)
        nbytes = sum(n * (2 * 3 * tokens * (i + o) + i * o * (2 + 2 + 4)) for i, o, n in mats)
        out.append(kr.Cost(f"dense {group}", flops, nbytes))
    return out


def step_roofline(cfg, gen: TpuGeneration, batch: int, seq_len: int) -> dict:
    """Rows per kernel and the step's totals (see the module docstring)."""
    cfg = _cfg(cfg, gen)
    tokens = batch * seq_len
    costs = mixer_costs(cfg, gen, batch, seq_len) + dense_costs(cfg, tokens)
    n_params = accounting.param_counts(cfg)["total"]
    costs.append(kr.Cost("optimizer (AdamW)", 0.0, ADAMW_BYTES_PER_PARAM * n_params))
    rows = [kr.roofline(c, gen) for c in costs]
    time_s = sum(r["time_s"] for r in rows)
    flops, nbytes = sum(r["flops"] for r in rows), sum(r["bytes"] for r in rows)
    useful = accounting.flops_per_token_exact(cfg, seq_len) * tokens
    worst = max(rows, key=lambda r: r["time_s"])
    excess = {r["name"]: r["time_s"] - r["flops"] / gen.peak_bf16_flops for r in rows}
    limiting = max(excess, key=excess.get)
    step = {"arch": cfg.arch, "size": cfg.size, "tpu": gen.name, "batch": batch, "seq_len": seq_len,
            "chunk": cfg.chunk_size, "flops": flops, "useful_flops": useful, "bytes": nbytes,
            "intensity": flops / nbytes, "time_s": time_s,
            "mfu_bound": useful / (gen.peak_bf16_flops * time_s),
            "bound_by": f"{worst['name']} ({worst['bound']}-bound)",
            "memory_limited_by": limiting if excess[limiting] > 0 else None,
            "memory_excess_s": max(excess[limiting], 0.0)}
    return {"rows": rows, "step": step}
