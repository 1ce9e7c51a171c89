"""The list of runs of a scaling study, from a preset (configs/study/*.py).

    runs = build_plan(study_config, workdir)      # archs × sizes, index order arch-major
    run.config      full base_config() of the run (model from the preset's model file, shared budget)
    run.steps       ceil(tokens / (batch · seq_len)): the size's token budget (tokens_of)
    run.pf_days     Table-1 compute C = accounting.paper_flops_per_token · tokens / PF_DAY
    run.command     the equivalent `python -m linscale_jax.train ...` line (for hand-off to hosts)

Preset fields (ConfigDict `study`): model_file (a config file with get_config('<arch>-<size>')),
archs, sizes (comma lists), tokens (per run), tokens_by_size (a size's own budget instead of tokens,
"d32l2=12582912,d48l2=5767168": study.scaling.bracket_design chooses them), checkpoints (dense checkpoints per run, plus
log_spaced early ones for the envelope), overrides (nested sections of the run config, e.g.
overrides.train.batch_size = 8) applied to every run, eval (val_batches, niah_grid, probe_items) and
fit (approach, bootstrap, include_clamped).
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from enum import StrEnum
from pathlib import Path

import ml_collections

from linscale_jax.study import files
from linscale_jax.contract import PF_DAY, split_list
from linscale_jax.models import sizes
from linscale_jax.train import rule


@dataclasses.dataclass
class Run:
    index: int
    arch: str
    size: str
    config: ml_collections.ConfigDict
    workdir: str
    steps: int
    tokens: int
    flops: float  # paper C (Table 1) of the whole run, FLOPs
    flops_exact: float
    n_params: int  # non-embedding, from the real parameter tree
    command: str
    seed: int = 0  # train.seed = data.seed: replicate runs of a size have seed >= 1
    final: bool = False  # gets the final-checkpoint tasks (NIAH, the probe): runner.plan sets it

    @property
    def name(self) -> str:
        return str(self.config.name)  # run_name(arch, size, seed) (run_config), or a tuning cell's

    @property
    def pf_days(self) -> float:
        return self.flops / PF_DAY


def run_name(arch: str, size: str, seed: int = 0) -> str:
    return f"{arch}-{size}" + (f"-seed{seed}" if seed else "")


def check_size_names(study, names: set, field: str) -> None:
    """Names in `field` (a per-size setting) that the study does not train are unused, so a
    preset's --config.sizes can be narrowed alone; each must still be a size of the model file
    (a typo stops the study, naming the sizes it knows)."""
    arch = split_list(study.archs, "study.archs")[0]
    for name in sorted(set(names) - set(split_list(study.sizes, "study.sizes"))):
        try:
            model_config(study, f"{arch}-{name}")
        except ValueError as e:
            raise ValueError(f"{field} names {name!r}, not a size of {study.model_file}: {e}") from None


def replicate_seeds(study, size: str) -> list[int]:
    """The seeds a size is trained with: 0, plus 1..replicates.seeds when study.replicates.sizes
    names it ("smallest", "largest", a size, or a comma list of those)."""
    rep = study.get("replicates", None)
    if rep is None or not int(rep.get("seeds", 0)) or not str(rep.get("sizes", "")):
        return [0]
    sizes = split_list(study.sizes, "study.sizes")
    named = set()
    for x in split_list(str(rep.sizes), "study.replicates.sizes"):
        named.add(sizes[0] if x == "smallest" else sizes[-1] if x == "largest" else x)
    check_size_names(study, named, "study.replicates.sizes")
    return [0, *range(1, int(rep.seeds) + 1)] if size in named else [0]


def tokens_of(study, size: str) -> float:
    """The training tokens of a run of `size`: its entry in study.tokens_by_size ("size=tokens,...")
    or study.tokens."""
    spec = str(study.get("tokens_by_size", "") or "")
    if not spec:
        return float(study.tokens)
    own = {}
    for item in split_list(spec, "study.tokens_by_size"):
        name, _, value = item.partition("=")
        try:
            own[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"study.tokens_by_size entry {item!r} is not size=tokens; write it as "
                             "d32l2=12582912,d48l2=5767168") from None
        if not own[name.strip()] > 0:
            raise ValueError(f"study.tokens_by_size gives {name.strip()} {value} tokens; give it a positive budget")
    check_size_names(study, set(own), "study.tokens_by_size")
    return own.get(size, float(study.tokens))


def model_config(study, name: str) -> ml_collections.ConfigDict:
    """get_config(name) of study.model_file (a packaged config such as ladder or paper, or a path)."""
    from linscale_jax.run import config_file

    return config_file.load(str(study.model_file), name)


def _flatten(cfg, prefix="") -> dict:
    out = {}
    for k, v in cfg.items():
        if isinstance(v, ml_collections.ConfigDict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _set(cfg, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    if leaf not in node:
        raise ValueError(f"study override {dotted!r}: the run config has no field {leaf!r} in "
                         f"{'.'.join(parents) or 'the top level'}; check the preset's overrides")
    node[leaf] = value


def run_config(study, arch: str, size: str, seed: int = 0) -> ml_collections.ConfigDict:
    """The full config of one run: the model file's config, the preset's overrides, the budget
    (seed >= 1: a replicate, train.seed = data.seed = seed). A variant label (`cosformer2+tpe=none`)
    takes its arch's lr, batch, beta2 and warmup at this size, pinned (optim.rule=paper)."""
    cfg = model_config(study, f"{arch}-{size}")
    for key, value in _flatten(study.overrides).items():
        _set(cfg, key, value)
    variant = sizes.Variant.parse(arch)
    if variant.is_variant:  # a variant (an ablation of one mechanism) trains at its arch's settings for this size
        ref = run_config(study, variant.arch, size, seed)
        cfg.optim.update(lr=ref.optim.lr, b2=ref.optim.b2, warmup_steps=ref.optim.warmup_steps, rule="paper")
        cfg.train.batch_size = ref.train.batch_size
    rule.resolve(cfg)  # optim.rule: the tuned rule's lr, batch, b2, warmup, before the budget's steps
    tr = cfg.train
    tokens_per_step = int(tr.batch_size) * int(tr.seq_len)
    cfg.train.steps = max(1, math.ceil(tokens_of(study, size) / tokens_per_step))
    rule.resolve(cfg)  # again at the budget's steps: a rule with a horizon sets the rate by the run's length
    n_ckpt = int(study.checkpoints)
    if n_ckpt < 2:
        raise ValueError(f"study.checkpoints={n_ckpt}: the envelope needs >= 2 checkpoints per run")
    cfg.checkpoint.every_steps = max(1, cfg.train.steps // n_ckpt)
    cfg.checkpoint.keep = 0
    cfg.name = run_name(arch, size, seed)
    if seed:
        cfg.train.seed = int(cfg.train.seed) + seed
        cfg.data.seed = int(cfg.data.seed) + seed
    return cfg


def command(study, cfg, workdir: str) -> str:
    """`python -m linscale_jax.train` line reproducing cfg: model file + every changed field."""
    model = "-".join(cfg.name.split("-")[:2])  # <arch>-<size> (a replicate's name adds -seed<k>)
    base = _flatten(model_config(study, model))
    flags = [f"--config.{k}={v}" for k, v in _flatten(cfg).items() if base.get(k) != v]
    return " ".join(["python -m linscale_jax.train", f"--config={study.model_file}:{model}",
                     f"--workdir={shlex.quote(workdir)}", *flags])


def build_plan(study, workdir: str) -> list[Run]:
    from linscale_jax.study.scaling import laws

    laws.count_of(study)  # a bad study.fit.count stops the study before it trains
    runs = []
    for arch, size, seed in ((a, s, k) for a in split_list(study.archs, "study.archs") for s in split_list(study.sizes, "study.sizes")
                             for k in replicate_seeds(study, s)):
        runs.append(make_run(study, run_config(study, arch, size, seed), arch, size, seed, workdir,
                             index=len(runs)))
    return runs


def make_run(study, cfg, arch: str, size: str, seed: int, workdir: str, index: int) -> Run:
    """The Run of one run config (cfg.name names its directory under DIR/runs)."""
    from linscale_jax.config import check_model
    from linscale_jax.models import accounting

    if str(cfg.train.wandb) and not str(cfg.train.wandb_group):  # one W&B group per study
        cfg.train.wandb_group = Path(workdir).resolve().name
    mc = check_model(cfg, where=cfg.name)  # every model option, against train.seq_len
    seq = int(cfg.train.seq_len)
    tokens = int(cfg.train.steps) * int(cfg.train.batch_size) * seq
    rd = files.study_run_dir(workdir, cfg.name)
    return Run(index=index, arch=arch, size=size, config=cfg, workdir=rd, steps=int(cfg.train.steps),
               tokens=tokens, flops=accounting.paper_flops_per_token(mc, seq) * tokens,
               flops_exact=accounting.flops_per_token_exact(mc, seq) * tokens,
               n_params=int(accounting.param_counts(mc)["non_embedding"]),
               command=command(study, cfg, rd), seed=seed)


def dry_run_text(runs: list[Run], spec: str | None = None) -> str:
    from linscale_jax.study.experiments import shard

    mine = shard(runs, spec)
    lines = [f"{len(mine)} run(s){'' if not spec else f' in shard {spec} of {len(runs)}'}:"]
    for r in mine:
        lines.append(f"[{r.index:3d}] {r.name:<22} N={r.n_params:.4g} steps={r.steps} tokens={r.tokens:.4g} "
                     f"C={r.pf_days:.4g} PF-days (paper Table 1)  exact={r.flops_exact / PF_DAY:.4g} PF-days")
        lines.append(f"      {r.command}")
    by_arch: dict[str, float] = {}
    for r in mine:
        by_arch[r.arch] = by_arch.get(r.arch, 0.0) + r.pf_days
    for a, c in by_arch.items():
        lines.append(f"total {a}: {c:.6g} PF-days")
    lines.append(f"total: {len(mine)} runs, {sum(r.tokens for r in mine):.6g} tokens, "
                 f"{sum(r.pf_days for r in mine):.6g} PF-days (Table-1 accounting), "
                 f"{sum(r.flops_exact for r in mine) / PF_DAY:.6g} PF-days exact")
    return "\n".join(lines)


class Estimator(StrEnum):
    """A checkpoint's loss as a scaling-law point (study.estimators)."""

    VAL_LOSS = "val_loss"  # the checkpoint's own weights (the paper's)
    COOLDOWN = "cooldown"  # a short learning-rate cooldown branched off the checkpoint (scaling.cooldown)
    VAL_LOSS_AVG = "val_loss_avg"  # the mean weights of the last quarter of the checkpoints (LAWA)


def estimators(study) -> list[Estimator]:
    """The study's loss estimators (study.estimators); the first is the laws' and plots'."""
    names = split_list(str(study.get("estimators", "val_loss")), "study.estimators")
    bad = [n for n in names if n not in list(Estimator)]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"study.estimators={study.estimators!r}: give distinct names from "
                         f"{', '.join(Estimator)}")
    return [Estimator(n) for n in names]


def fit_min_step(runs) -> int:
    """First step the laws use: checkpoints inside the learning-rate warmup are left out, since a
    model whose rate has not reached its peak is not on any size's compute-efficient trajectory."""
    return max(int(r.config.optim.warmup_steps) for r in runs)


def niah_unmeasured(config, task: str = "niah") -> str | None:
    """Why a run of `config` cannot be measured by NIAH within its trained context (the study's
    lengths: eval.niah.context_grid), or None: its shortest useful prompt (the needle, the question
    and 32 haystack tokens, in the run's vocabulary) with its answer must fit in train.seq_len."""
    from linscale_jax import data
    from linscale_jax.eval import niah

    vocab = data.get_vocabulary(config.data)
    need = niah.min_length(lambda text: list(vocab.encode(text)), "easy" if task == "niah_easy" else "standard")
    seq = int(config.train.seq_len)
    if need <= niah.in_context_max(seq):
        return None
    return (f"the shortest prompt, {need} tokens of needle, question and 32 haystack tokens, and its answer "
            f"do not fit in the trained context of {seq} tokens: NIAH needs train.seq_len >= "
            f"{need + 1 + niah.ANSWER_TOKENS}")
