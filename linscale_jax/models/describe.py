"""Print a model's shape, parameter counts, state size and FLOPs (paper Table-1 and exact definitions).

    python -m linscale_jax.models.describe            # every ladder config (configs/ladder.py), all archs
    python -m linscale_jax.models.describe --json     # the same as a JSON list
    python -m linscale_jax.models.describe --paper [--json]   # every arch at the paper's six sizes
    python -m linscale_jax.models.describe --config=configs/paper.py:tnl-410m [--config.model.n_layers=4]

FLOPs are per token at --seq_len (default: config.train.seq_len; 8192 with --paper, 128 for the
ladder, the cpu study's length). Each row has the shape (l, d, h, head_dim = d/h, g, vocab), the
parameter counts, both FLOP definitions, the decoding state of one layer for one sequence
(`state_floats_per_layer`: a linear mixer's fixed state h × key dim × value dim, with
`state_floats_per_head`; softmax attention: `kv_floats_per_token_per_layer`, its KV cache per
token) and, in the JSON only, the architecture's extras: TNL `decay_per_layer`, the per-head decay
rates λ of every layer ([l][h], from model.tnl.decay_rule); HGRN2 `lower_bound_per_layer`, the
forget-gate lower bounds β_j at initialisation ([l]; learnable). A hybrid stack (model.layers) adds
`layers`, gives both state columns as means over its layers, and `kv_cache_bytes_per_token` (its
softmax layers' KV caches; accounting.kv_cache_bytes_per_token).
"""

from __future__ import annotations

import json
import math

import jax
from absl import app, flags
from flax import nnx
from ml_collections import config_flags

from linscale_jax.models import accounting
from linscale_jax.models import ModelConfig, registry, sizes
from linscale_jax.models.layers import KeyGen

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/paper.py:tnl-410m.")
_PAPER = flags.DEFINE_bool("paper", False, "Describe every registered arch at the paper's six sizes "
                           "(the paper's 24 configs, and gdn beyond them) instead of the ladder.")
_JSON = flags.DEFINE_bool("json", False, "Print JSON instead of a table.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", None, "Sequence length for FLOPs per token.")

COLUMNS = [  # (key, header, format)
    ("arch", "arch", "{}"), ("size", "size", "{}"), ("n_layers", "l", "{}"), ("d_model", "d", "{}"),
    ("n_heads", "h", "{}"), ("head_dim", "e", "{}"), ("ffn_dim", "g", "{}"), ("vocab_size", "vocab", "{}"),
    ("params_total", "total", "{:,}"), ("params_embedding", "embedding", "{:,}"),
    ("params_non_embedding", "non-emb", "{:,}"), ("paper_params", "paper N", "{:,}"),
    ("state_floats_per_layer", "state/layer", "{:,}"),
    ("paper_flops_per_token", "paper C/tok", "{:.4g}"),
    ("flops_per_token_exact", "exact C/tok", "{:.4g}"),
]


def state_floats(cfg: ModelConfig) -> dict:
    """One layer's decoding state for one sequence, from the mixer's own init_cache: a fixed
    recurrent state (state_floats_per_layer, state_floats_per_head) or a cache growing per token
    (kv_floats_per_token_per_layer; state_floats_per_layer None). A hybrid stack: both, each the
    mean over its layers (its linear layers' states; its softmax layers' KV growth), and the
    bytes its KV caches add per token (kv_cache_bytes_per_token)."""
    if cfg.hybrid:
        per = {a: state_floats(cfg.pure(a)) for a in cfg.archs}
        kinds = cfg.layer_archs
        return {"state_floats_per_layer": sum(per[a].get("state_floats_per_layer") or 0 for a in kinds)
                / len(kinds),
                "kv_floats_per_token_per_layer": sum(per[a].get("kv_floats_per_token_per_layer", 0)
                                                     for a in kinds) / len(kinds),
                "kv_cache_bytes_per_token": accounting.kv_cache_bytes_per_token(cfg)}
    mixer = nnx.eval_shape(lambda: registry.get(cfg.arch).mixer(cfg, keys=KeyGen(jax.random.key(0))))

    def floats(max_len):
        return sum(math.prod(a.shape) for a in jax.tree.leaves(mixer.init_cache(1, max_len)))

    per_token = floats(2) - floats(1)
    if per_token:
        return {"state_floats_per_layer": None, "kv_floats_per_token_per_layer": per_token}
    fixed = floats(1)
    return {"state_floats_per_layer": fixed, "state_floats_per_head": fixed // cfg.n_heads}


def describe_row(model_cfg, seq_len: int) -> dict:
    """accounting.summary(...), the state size, and the architecture's describe extras (TNL's
    decay_per_layer, HGRN2's lower_bound_per_layer)."""
    cfg = model_cfg if isinstance(model_cfg, ModelConfig) else ModelConfig.from_config(model_cfg)
    row = accounting.summary(cfg, seq_len)
    if cfg.hybrid:
        row["layers"] = cfg.layers
    row.update(state_floats(cfg))
    for a in cfg.archs:  # each arch's extras, of its own layers
        row.update(registry.get(a).describe_extras(cfg.pure(a).replace(
            n_layers=cfg.layer_archs.count(a))))
    return row


def paper_rows(seq_len: int = 8192) -> list[dict]:
    """One row per paper size of every registered architecture (arch-major order)."""
    return [describe_row(sizes.paper_model(arch, size), seq_len)
            for arch in registry.ARCHS for size in sizes.PAPER_SIZES]


def ladder_rows(seq_len: int = 128) -> list[dict]:
    """One row per ladder size of every registered architecture (arch-major order)."""
    return [describe_row(sizes.ladder_model(arch, size), seq_len)
            for arch in registry.ARCHS for size in sizes.LADDER]


def format_table(rows: list[dict]) -> str:
    cells = [[h for _, h, _ in COLUMNS]] + [[("-" if r[k] is None else f.format(r[k])) for k, _, f in COLUMNS]
                                           for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv):
    del argv
    if _PAPER.value:
        rows = paper_rows(_SEQ_LEN.value or 8192)
    elif _CONFIG.value is not None:
        config = _CONFIG.value
        rows = [describe_row(config.model, _SEQ_LEN.value or config.train.seq_len)]
    else:
        rows = ladder_rows(_SEQ_LEN.value or 128)
    print(json.dumps(rows, indent=1) if _JSON.value else format_table(rows))


if __name__ == "__main__":
    import sys

    from linscale_jax.run import command_line, config_file

    app.run(main, argv=config_file.command_argv(sys.argv),  # --config=tiny[:ARG]: a packaged config
            flags_parser=command_line.parser(__doc__, _CONFIG))
