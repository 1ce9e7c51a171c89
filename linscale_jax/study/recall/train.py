"""The recall study's runs: one trainer run per (arch label, shape, seed, lr) on MQAR
(data.task=mqar), stopped early at the validation accuracy target (train.stop_at), with
checkpoints and resume like every run; then scored per number of pairs.

    runs = build_runs(study, workdir)
    result = process_run(study, runs[0])   # DIR/runs/<run>/result.json, reused while settings hold

A shape "d64e16" is d_model 64 with head dim 16; study.n_layers layers; GLU width 8·ceil(int(8d/3)/8).
An arch label is a registered arch or a variant "<arch>+<model field>=<value>" (models.sizes.Variant),
e.g. tnl+short_conv=4. The baseline (contract.BASELINE_ARCH) runs at study.baseline_shapes for at
most study.baseline_max_steps steps (when set), the others at study.shapes for study.max_steps;
study.sweep_steps (when set) trains every label that many steps instead (the sweep: its rates are
chosen at each label's max_steps from the validation history).
Learning rates: study.lr (module `learning_rates`), else the rates file study.rates
(study.recall.rates).
A run is `python -m linscale_jax.train` on its config (Run.config): train.seed = data.seed = the
seed (initialisation, and the training and validation sequences), validation every
study.eval_every steps on study.val_sequences sequences (its rows in DIR/runs/<run>/metrics.jsonl:
the run's validation history), a checkpoint every study.checkpoint_every steps and at the stop.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time

import numpy as np

from linscale_jax.contract import BASELINE_ARCH, split_list
from linscale_jax.models.sizes import Variant
from linscale_jax.study import files
from linscale_jax.study.recall import rates as rates_file
from linscale_jax.study.recall.table import Status, did_not_train


def _print(msg: str) -> None:
    print(msg, flush=True)


def parse_shape(shape: str) -> tuple[int, int]:
    """'d64e16' -> (d_model 64, head dim 16)."""
    m = re.fullmatch(r"d(\d+)e(\d+)", shape.strip())
    if not m or int(m.group(1)) % int(m.group(2)):
        raise ValueError(f"recall shape {shape!r}: write d<d_model>e<head dim> with the head dim "
                         "dividing d_model, e.g. d64e16")
    return int(m.group(1)), int(m.group(2))


def _is_baseline(label: str) -> bool:
    return Variant.parse(label).arch == BASELINE_ARCH


def shapes_of(study, label: str) -> list[str]:
    """The shapes `label` runs at: study.baseline_shapes for the baseline, study.shapes otherwise."""
    base = _is_baseline(label) and study.get("baseline_shapes")
    return split_list(study.baseline_shapes, "study.baseline_shapes") if base else split_list(study.shapes, "study.shapes")


def max_steps_of(study, label: str) -> int:
    """The most steps `label` trains: study.baseline_max_steps for the baseline (the positive
    control) when set, study.max_steps otherwise."""
    return int(study.get("baseline_max_steps") or study.max_steps) if _is_baseline(label) else int(study.max_steps)


def train_steps(study, label: str) -> int:
    """The steps `label` trains: study.sweep_steps when set (the sweep), else max_steps_of."""
    return int(study.get("sweep_steps") or 0) or max_steps_of(study, label)


def learning_rates(study, label: str) -> list[float]:
    """The rates of `label`: study.lr = '3e-3' (every label), 'llama:1e-3,tnl+short_conv=4:3e-3/1e-2'
    (per label; a '/' list sweeps), or '' (the rates file study.rates)."""
    spec = str(study.lr).strip()
    if not spec:
        return [rates_file.rate(str(study.rates), label)]
    if ":" not in spec:
        return [float(x) for x in spec.split("/")]
    table = dict(item.rsplit(":", 1) for item in split_list(spec, "study.lr"))
    if label not in table:
        raise ValueError(f"study.lr={spec!r} gives no rate for {label!r}; add '{label}:<lr>'")
    return [float(x) for x in table[label].split("/")]


def model_config(study, label: str, d: int, e: int):
    """The model of `label` at shape d<d>e<e> with study.n_layers layers, study.model_changes applied
    to every label, the label's own changes winning over both (e.g. tnl+n_heads=2); a hybrid label whose layer period is deeper than
    study.n_layers is refused."""
    from linscale_jax.data import mqar
    from linscale_jax.models import ModelConfig, sizes

    from linscale_jax.models.variants import merge

    v = Variant.parse(label)
    base = dict(arch=v.arch, size=f"d{d}e{e}", n_layers=int(study.n_layers), d_model=d, n_heads=d // e,
                ffn_dim=sizes.paper_ffn_dim(d, 8),
                vocab_size=mqar.vocab_size(int(study.n_keys), int(study.n_values)),
                max_seq_len=int(study.seq_len))
    changes = merge(study_model_changes(study, v.arch), v.model_changes())
    period = layer_period(changes.get("layers", ""))
    if period > int(study.n_layers):
        raise ValueError(f"recall label {label!r} stacks layers {changes['layers']!r}, a period of {period} "
                         f"layers, deeper than study.n_layers={study.n_layers}; give --config.n_layers={period} "
                         "(or more) or drop the label from study.archs")
    return ModelConfig(**merge(base, changes))


def study_model_changes(study, arch: str) -> dict:
    """The model changes study.model_changes makes to every label (a variant's text without its arch,
    e.g. 'init_std=0.04' or 'init_std=0.04+embed_scale=sqrt_d'; '' none), typed for `arch`."""
    text = str(study.get("model_changes", "") or "").strip()
    return Variant.parse(f"{arch}+{text}").model_changes() if text else {}


def layer_period(pattern: str) -> int:
    """Layers in one period of a layer pattern: 'tnl*3,llama' -> 4 ('' -> 0)."""
    return sum(int(part.partition("*")[2] or 1) for part in pattern.split(",")) if pattern else 0


def state_floats(cfg, seq_len: int) -> int:
    """Decoding floats per layer for one sequence of seq_len tokens, the mean over the layers
    (models.accounting.state_floats_per_layer: a linear layer's fixed state, a softmax layer's KV
    cache at seq_len tokens; a hybrid stack averages both)."""
    from linscale_jax.models import accounting

    return int(round(accounting.state_floats_per_layer(cfg, seq_len)))


def usable_state_floats(cfg, seq_len: int) -> int:
    """The state a layer can hold over the whole context, the mean over the layers: in the layers of
    an arch with a fixed per-head decay (describe_extras' decay_per_layer: TNL) only the heads whose
    memory 1/(-ln λ) reaches seq_len count (λ^seq_len >= 1/e), the convolution's inputs beside them;
    every other layer (a softmax layer's KV cache included) its nominal state. A hybrid stack's TNL
    layers take the decays of a TNL model of their count (models.describe.describe_row)."""
    from linscale_jax.models import accounting, registry
    from linscale_jax.models.linear_common import short_conv_state_floats

    total = 0.0
    counts = accounting.layer_counts(cfg)
    for arch, n in counts.items():
        pure = cfg.pure(arch).replace(n_layers=n)
        spec = registry.get(arch)
        state = spec.state_floats(pure, seq_len)
        decay = spec.describe_extras(pure).get("decay_per_layer")
        if decay:
            spans = np.mean([np.mean([lam >= math.exp(-1.0 / seq_len) for lam in layer]) for layer in decay])
            conv = short_conv_state_floats(pure)
            state = spans * (state - conv) + conv
        total += n * state
    return int(round(total / sum(counts.values())))


def mqar_options(study) -> dict:
    return dict(n_pairs=[int(p) for p in split_list(study.n_pairs, "study.n_pairs")], n_keys=int(study.n_keys),
                n_values=int(study.n_values), placement=str(study.placement),
                power_a=float(study.power_a))


@dataclasses.dataclass
class Run:
    """One training run (the fields the executor reads: name, workdir, steps, n_params, flops_exact,
    config). arch: the label (a registered arch or a variant)."""

    arch: str
    d_model: int
    head_dim: int
    seed: int
    lr: float
    workdir: str
    steps: int  # at most; the early stop may end sooner
    n_params: int
    flops_exact: float
    state_floats: int
    usable_state_floats: int
    config: object = None  # the trainer's config (run_config)

    @property
    def name(self) -> str:
        return f"{self.arch}-d{self.d_model}e{self.head_dim}-s{self.seed}-lr{self.lr:g}"

    @property
    def variant(self) -> str:
        """'short_conv=4' of 'tnl+short_conv=4'; '' for a registered arch as the paper defines it."""
        return Variant.parse(self.arch).text

    def settings(self, study) -> dict:
        """What the run's result depends on: the model section, the optimizer and step fields of the
        trainer's config and the task (a stored result is reused while these match: `matches`)."""
        keys = ("n_pairs", "n_keys", "n_values", "placement", "power_a", "eval_every", "val_sequences",
                "stop_accuracy", "eval_sequences")
        c = self.config
        return dict(arch=self.arch, model=c.model.to_dict(),
                    optim={k: c.optim[k] for k in OPTIM_FIELDS},
                    train={k: c.train[k] for k in ("steps", "batch_size", "seq_len", "grad_accum", "seed")},
                    **{k: str(study[k]) for k in keys})


def run_config(study, label: str, d: int, e: int, seed: int, lr: float, steps: int, workdir: str):
    """The trainer's config of one run (linscale_jax.config.base_config): the model, MQAR data,
    the optimizer, the steps, the validation cadence and the early stop."""
    from linscale_jax.config import base_config

    c = base_config()
    c.name = os.path.basename(workdir)
    c.model.update(model_config(study, label, d, e).to_dict())
    c.data.update(task="mqar", seed=seed)
    c.data.mqar = mqar_options(study)
    c.optim.update(lr=lr, schedule=str(study.schedule), warmup_steps=int(study.warmup_steps),
                   weight_decay=float(study.weight_decay))
    every, bs = int(study.eval_every), int(study.batch_size)
    c.train.update(steps=steps, batch_size=bs, seq_len=int(study.seq_len), seed=seed, log_every=every,
                   eval_every=every, eval_batches=max(1, int(study.val_sequences) // bs),
                   stop_at=f"val_accuracy>={float(study.stop_accuracy):g}")
    c.checkpoint.update(every_steps=int(study.checkpoint_every), log_spaced=0, keep=2, async_save=False)
    c.mesh.update(data=1, fsdp=1, tensor=1, seq=1)
    return c


# the optimizer fields a run's result depends on (linscale_jax.train.optim.make_optimizer reads them)
OPTIM_FIELDS = ("lr", "weight_decay", "b1", "b2", "eps", "schedule", "warmup_steps", "min_lr_ratio",
                "decay_fraction", "clip_norm")


def matches(stored, wanted) -> bool:
    """True when `stored` holds every field of `wanted` with its value (nested dicts compared field by
    field; fields only `stored` has, from a config with more fields, are ignored)."""
    if isinstance(wanted, dict):
        return isinstance(stored, dict) and all(k in stored and matches(stored[k], v)
                                                for k, v in wanted.items())
    return stored == wanted


def build_runs(study, workdir: str) -> list[Run]:
    from linscale_jax.models import accounting

    seq_len, runs = int(study.seq_len), []
    for label in split_list(study.archs, "study.archs"):
        steps = train_steps(study, label)
        tokens = steps * int(study.batch_size) * seq_len
        for shape in shapes_of(study, label):
            d, e = parse_shape(shape)
            mc = model_config(study, label, d, e)
            state = state_floats(mc, seq_len)
            for lr in learning_rates(study, label):
                for seed in (int(s) for s in split_list(study.seeds, "study.seeds")):
                    run = Run(label, d, e, seed, lr, "", steps, accounting.param_counts(mc)["non_embedding"],
                              3 * accounting.flops_per_token_exact(mc, seq_len) * tokens, state,
                              usable_state_floats(mc, seq_len))
                    run.workdir = os.path.join(workdir, "runs", run.name)
                    run.config = run_config(study, label, d, e, seed, lr, steps, run.workdir)
                    runs.append(run)
    return runs


def history(workdir) -> list[dict]:
    """The run's validation rows (metrics.jsonl): step, train_loss (that step's), val_loss, val_accuracy."""
    from linscale_jax import contract

    path = os.path.join(workdir, contract.METRICS)
    rows = [json.loads(x) for x in open(path)] if os.path.exists(path) else []
    return [dict(step=r["step"], train_loss=r["loss"], val_loss=r["val_loss"], val_accuracy=r["val_accuracy"])
            for r in rows if "val_accuracy" in r]


def train_run(study, run: Run, log=_print) -> dict:
    """Train (or resume) the run with the trainer, stopping early at the target, then score it per
    number of pairs."""
    from linscale_jax.data import mqar
    from linscale_jax.errors import Stopped
    from linscale_jax.models import ModelConfig
    from linscale_jax.parallel import sharding
    from linscale_jax.train import early_stop
    from linscale_jax.train import loop as trainer

    import jax

    t0 = time.time()
    summary = trainer.train(run.config, run.workdir)
    if summary.get("stopped"):
        raise Stopped(f"[study] stopped by {summary['stopped']}: {run.name} saved its checkpoint at step "
                      f"{summary['step']}; re-run the same command to resume.")
    fns, mesh = trainer.step_functions(run.config)
    params, rest = summary["params"], fns.rest()
    sums = early_stop.prediction_sums(sharding.model_parts(ModelConfig.from_config(run.config.model)).graphdef)
    opts, seq_len, bs = mqar_options(study), int(study.seq_len), int(study.batch_size)
    per_pairs, k_all, n_all, loss_all = {}, 0, 0, 0.0
    n_seq = int(study.eval_sequences)
    for p in opts["n_pairs"]:
        rng = np.random.default_rng([run.seed, mqar.SPLITS["test"], p])
        k = n = 0
        loss = 0.0
        for s in range(0, n_seq, bs):
            b = mqar.batch(rng, min(bs, n_seq - s), seq_len, p, opts["n_keys"], opts["n_values"],
                           opts["placement"], opts["power_a"])
            with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
                c, m, ce = sums(params, rest, {key: jax.numpy.asarray(v) for key, v in b.items()})
            k, n, loss = k + int(c), n + int(m), loss + float(ce)
        per_pairs[str(p)] = dict(correct=k, queries=n, loss=loss / max(n, 1))
        k_all, n_all, loss_all = k_all + k, n_all + n, loss_all + loss
    test_loss = loss_all / max(n_all, 1)
    status = Status.DID_NOT_TRAIN if did_not_train(test_loss, opts["n_values"], float(study.dnt_margin)) else Status.TRAINED
    hist = history(run.workdir)
    step = int(summary["step"])
    return dict(settings=run.settings(study), steps=step, stopped_early=step < run.steps,
                val_accuracy=hist[-1]["val_accuracy"] if hist else float("nan"), test_loss=test_loss,
                status=status, per_pairs=per_pairs, history=hist, seconds=time.time() - t0)


def result_path(run: Run) -> str:
    return os.path.join(run.workdir, files.RECALL_RESULT)


def load_result(study, run: Run) -> dict | None:
    """The stored result of `run`, if its settings match the study's."""
    try:
        with open(result_path(run)) as f:
            res = json.load(f)
    except (OSError, ValueError):
        return None
    return res if matches(res.get("settings"), json.loads(json.dumps(run.settings(study)))) else None


def process_run(study, run: Run, log=_print, final: bool = True) -> dict:
    """Train and score `run` unless its result is stored; write DIR/runs/<run>/result.json."""
    res = load_result(study, run)
    if res is None:
        res = train_run(study, run, log)
        os.makedirs(run.workdir, exist_ok=True)
        tmp = result_path(run) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, result_path(run))
    log(f"[recall] {run.name}: {res['status']}, {res['steps']} steps, test loss {res['test_loss']:.3f}, "
        + ", ".join(f"P={p}: {v['correct'] / max(v['queries'], 1):.3f}" for p, v in res["per_pairs"].items()))
    return res
