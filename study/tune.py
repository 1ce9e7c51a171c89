"""Per-size tuning of the peak learning rate, batch and AdamW β2 (Porian et al. 2024), pruned.

    python -m study --config=configs/study/tune.py --workdir=DIR [--dry_run]
    run_tune(study, workdir)      # trains the grid stage by stage, then writes DIR/tune/

Every cell is one study run (study.plan, study.runner.process_run, the study's worker pool, its
progress lines and resume): one arch and ladder size trained on the preset's token budget with
lr = tune.lr_base·2^k, `batch` sequences per step (steps = tokens / (batch·seq_len)), AdamW β2,
a constant rate after a warmup of tune.warmup_tokens_per_param·N tokens (N non-embedding); its
loss is the validation loss at the budget's end under the cooldown estimator (study.cooldown: the
last checkpoint cooled down over 10 % more steps). Runs are DIR/runs/<arch>-<size>-lr<lr>-bs<b>-
beta2_<β2>[-seed<s>].

The grid is pruned as Porian et al. tuned (a coarse learning-rate sweep, then the other axes around
its optimum, the rate re-tuned one step around each); stages per size of tune.archs:
  1. lr: tune.lr_points values in factor-2 steps at (tune.batch, tune.beta2), centred on the
     prior rule tune.prior_lr·(N/tune.prior_n)^tune.prior_exponent;
  2. β2 ∈ tune.beta2s at stage 1's best rate;
  3. every batch of tune.batches at the best β2, each at the best rate and one step either side;
  4. the β2 choice rechecked at the best batch when it is not tune.batch.
A line of rates (fixed batch and β2) whose best lies at its lowest or highest rate grows one step
that way (at most tune.max_extend steps), when its best is within tune.extend_within nats of the
size's best (always on stage 1's line); the batch axis grows the same way at its ends. Then one
replicate seed of the best cell of tune.replicate_sizes measures the seed-to-seed sd, the laws'
noise (study.tune_fit), and llama's rule is checked on every arch of tune.check_archs at
tune.check_sizes: the rule's batch and β2, the rate at the rule and one step either side (growing at
the edges). An arch whose best rate lies more than tune.own_rule_factor× from llama's rule at a size
gets its own lr law through its checked sizes.

Outputs, DIR/tune/: cells.csv and cells.md (every cell: loss under cooldown, val_loss at the end,
the stage's best marked), rule.json (the fitted rules with intervals, provenance and every cell's
loss: the file linscale_jax.train.rule reads; the repo ships one as linscale_jax/train/tuned_rule.json),
lr.png (loss against learning rate per size, a line per (batch, β2)), summary.md.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import os
import platform
import shlex
import subprocess
import sys

import numpy as np

from linscale_jax import contract
from study import plan as plan_lib
from study import tune_fit
from study.tune_fit import Cell, lr_of

TUNE_DIR = "tune"
DIVERGED = "diverged.txt"  # DIR/runs/<cell>/diverged.txt: the trainer stopped the run as diverged


def _print(msg: str) -> None:
    print(msg, flush=True)


def cell_name(c: Cell, lr_base: float) -> str:
    return (f"{c.arch}-{c.size}-lr{lr_of(c.k, lr_base):g}-bs{c.batch}-beta2_{c.beta2:g}"
            + (f"-seed{c.seed}" if c.seed else ""))


def _names(value) -> list[str]:
    """A comma list of the preset, [] when empty (tune.check_archs = "": no checks)."""
    return plan_lib.split_list(str(value)) if str(value or "").strip() else []


def _floats(value) -> list[float]:
    return [float(x) for x in plan_lib.split_list(str(value))]


def cell_config(study, c: Cell):
    """The run config of a cell: the preset's overrides with the cell's lr, batch, β2 and warmup
    (optim.rule=paper: the cell's own settings), its token budget in steps."""
    t = study.tune
    s = copy.deepcopy(study)
    n = n_params_of(study, c.arch, c.size)
    seq = int(s.overrides.train.seq_len)
    s.overrides.train.batch_size = int(c.batch)
    s.overrides.optim.update(lr=lr_of(c.k, float(t.lr_base)), b2=float(c.beta2), rule="paper",
                             warmup_steps=math.ceil(float(t.warmup_tokens_per_param) * n / (c.batch * seq)))
    cfg = plan_lib.run_config(s, c.arch, c.size, c.seed)
    cfg.name = cell_name(c, float(t.lr_base))
    return cfg


def make_run(study, c: Cell, workdir: str, index: int):
    return plan_lib.make_run(study, cell_config(study, c), c.arch, c.size, c.seed, workdir, index)


# ---- the staged grid -----------------------------------------------------------------------------

class _Plan:
    """The cells one (arch, size) asks for given the losses so far; `pending` once a stage waits."""

    def __init__(self, t, arch: str, size: str, loss: dict):
        self.t, self.arch, self.size, self.loss = t, arch, size, loss
        self.want: list[Cell] = []

    def need(self, cells) -> bool:
        """Add cells; True when some are not measured yet."""
        self.want.extend(c for c in cells if c not in self.want)
        return any(c not in self.loss for c in cells)

    def best_so_far(self) -> float:
        done = [self.loss[c] for c in self.want if c in self.loss]
        return min(done) if done else math.inf

    def line(self, batch: int, beta2: float, ks, always: bool = False) -> Cell | None:
        """The best cell of a line of rates, grown at its edges (module); None while unmeasured."""
        ks = sorted(set(ks))
        for _ in range(int(self.t.max_extend) + 1):
            cells = [Cell(self.arch, self.size, k, batch, beta2) for k in ks]
            if self.need(cells):
                return None
            best = min(cells, key=lambda c: self.loss[c])
            edge = best.k in (ks[0], ks[-1])
            close = self.loss[best] <= self.best_so_far() + float(self.t.extend_within)
            if not (edge and np.isfinite(self.loss[best]) and (always or close)):
                return best
            ks.append(ks[0] - 1 if best.k == ks[0] else ks[-1] + 1)
            ks.sort()
        return best


def tuned_cells(t, arch: str, size: str, n: float, loss: dict) -> list[Cell]:
    """Every cell of stages 1-4 (module) of one size that the losses so far call for."""
    p = _Plan(t, arch, size, loss)
    batch0, beta0 = int(t.batch), float(t.beta2)
    prior = float(t.prior_lr) * (n / float(t.prior_n)) ** float(t.prior_exponent)
    k0, half = tune_fit.grid_k(prior, float(t.lr_base)), int(t.lr_points) // 2
    b1 = p.line(batch0, beta0, range(k0 - half, k0 - half + int(t.lr_points)), always=True)
    if b1 is None:
        return p.want
    beta2s = _floats(t.beta2s)
    if p.need([Cell(arch, size, b1.k, batch0, b) for b in beta2s]):
        return p.want
    beta = min((Cell(arch, size, b1.k, batch0, b) for b in beta2s), key=lambda c: loss[c]).beta2
    bests, waiting = {}, False
    for b in (int(x) for x in _floats(t.batches)):
        r = p.line(b, beta, [b1.k - 1, b1.k, b1.k + 1])
        waiting |= r is None
        bests[b] = r
    if waiting:
        return p.want
    for _ in range(int(t.max_extend)):
        top = min(bests.values(), key=lambda c: loss[c])
        bs = sorted(bests)
        if top.batch not in (bs[0], bs[-1]) or not np.isfinite(loss[top]):
            break
        nb = top.batch // 2 if top.batch == bs[0] else top.batch * 2
        if nb < 1 or nb > int(t.max_batch) or nb in bests:
            break
        r = p.line(nb, beta, [top.k - 1, top.k, top.k + 1])
        if r is None:
            return p.want
        bests[nb] = r
    top = min(bests.values(), key=lambda c: loss[c])
    if top.batch != batch0:
        p.need([Cell(arch, size, top.k, top.batch, b) for b in beta2s])
    return p.want


def check_cells(t, arch: str, size: str, rule_lr: float, batch: int, beta2: float,
                loss: dict) -> list[Cell]:
    """An arch's check of a rule at one size: the rule's batch and β2, the rule's rate and one step
    either side, grown at the edges."""
    p = _Plan(t, arch, size, loss)
    k = tune_fit.grid_k(rule_lr, float(t.lr_base))
    p.line(batch, beta2, [k - 1, k, k + 1], always=True)
    return p.want


def sizes_of(study) -> list[str]:
    return plan_lib.split_list(study.sizes)


_N_PARAMS: dict = {}


def n_params_of(study, arch: str, size: str) -> float:
    """Non-embedding N of the model file's <arch>-<size> (linscale_jax.models.accounting)."""
    from linscale_jax.models import ModelConfig, accounting

    key = (str(study.model_file), arch, size)
    if key not in _N_PARAMS:
        cfg = plan_lib.load_config_file(plan_lib._model_file(study), f"{arch}-{size}")
        _N_PARAMS[key] = float(accounting.param_counts(ModelConfig.from_config(cfg.model))["non_embedding"])
    return _N_PARAMS[key]


def _replicate_sizes(study) -> list[str]:
    sizes = sizes_of(study)
    out = []
    for x in plan_lib.split_list(str(study.tune.replicate_sizes)):
        s = sizes[0] if x == "smallest" else sizes[-1] if x == "largest" else x
        if s not in out:
            out.append(s)
    return out


def rule_of(study, loss: dict, bootstrap: int | None = None) -> dict:
    """Every tuned arch's rule from the losses (study.tune_fit.fit_rules)."""
    t = study.tune
    sigma, _ = tune_fit.seed_sd(loss)
    out = {}
    for arch in plan_lib.split_list(study.archs):
        cells = {s: [c for c in loss if (c.arch, c.size) == (arch, s)] for s in sizes_of(study)}
        out[arch] = tune_fit.fit_rules(cells, loss, {s: n_params_of(study, arch, s) for s in cells},
                                       float(t.lr_base), sigma,
                                       bootstrap=int(t.bootstrap) if bootstrap is None else bootstrap,
                                       seed=int(t.seed))
    return out


def beta2_of(fitted: dict) -> float:
    """The rule's β2: the β2 of most sizes' best cells (ties: the larger)."""
    votes: dict[float, int] = {}
    for o in fitted["optima"].values():
        votes[o.best.beta2] = votes.get(o.best.beta2, 0) + 1
    return max(votes, key=lambda b: (votes[b], b))


def all_cells(study, loss: dict) -> list[Cell]:
    """Every cell the staged grid calls for given the losses so far (stages wait on each other)."""
    t = study.tune
    tuned = plan_lib.split_list(study.archs)
    want = []
    for arch in tuned:
        for s in sizes_of(study):
            want += tuned_cells(t, arch, s, n_params_of(study, arch, s), loss)
    if any(c not in loss for c in want):
        return want
    for arch in tuned:
        fitted = rule_of(study, loss, bootstrap=0)[arch]
        for s in _replicate_sizes(study):
            want.append(fitted["optima"][s].best._replace(seed=1))
    if any(c not in loss for c in want):
        return want
    ref = rule_of(study, loss, bootstrap=0)[tuned[0]]
    beta2 = beta2_of(ref)
    for arch in _names(study.tune.check_archs):
        for s in plan_lib.split_list(str(study.tune.check_sizes)):
            n = n_params_of(study, arch, s)
            want += check_cells(t, arch, s, tune_fit.law_value(ref["lr"], n),
                                _rule_batch(ref["batch"], n), beta2, loss)
    return want


def _rule_batch(law: dict, n: float) -> int:
    from linscale_jax.train import rule

    return rule.batch_from_law(law, n)


# ---- running -------------------------------------------------------------------------------------

def read_loss(run) -> tuple[float, float] | None:
    """(loss under cooldown at the budget's end, val_loss at the last checkpoint) of a finished
    cell; (inf, inf) for a diverged one; None when not finished."""
    from eval.runner import read_results
    from study import runner

    if os.path.exists(os.path.join(run.workdir, DIVERGED)):
        return math.inf, math.inf
    final = [r for r in read_results(run.workdir) if r["task"] == "val_loss" and int(r["step"]) == run.steps]
    dirs = runner.cooldown_dirs(run)
    cool = [r for d in dirs for r in read_results(d) if r["task"] == "val_loss"]
    if not final or not dirs or not cool:
        return None
    last = max(cool, key=lambda r: int(r["step"]))
    return float(last["val_loss"]), float(final[0]["val_loss"])


def _train(study, runs: list, workdir: str, log) -> None:
    """Process `runs` with the study's machinery (the worker pool when study.workers > 1); a run the
    trainer stops as diverged is marked (DIVERGED) and counts as an infinite loss."""
    from study import runner, workers

    n = runner.workers_for(study, len(runs), None)
    finals = {r.name: False for r in runs}
    failed = {}
    if n > 1:
        out = workers.run_parallel(study, runs, finals, n, runner.process_run, log, runner.eta_seconds)
        if out["stopped"] or out.get("signal"):
            from linscale_jax.errors import Stopped

            raise Stopped(f"[tune] stopped by {out.get('signal') or 'a signal'}; re-run the same command "
                          "to resume")
        failed = out["failed"]
    else:
        from linscale_jax.train.divergence import DivergenceError

        for k, r in enumerate(runs):
            log(f"[tune] run {k + 1}/{len(runs)}: {r.name}")
            try:
                runner.process_run(study, r, log=log, final=False)
            except DivergenceError as e:
                failed[r.name] = f"DivergenceError: {e}"
    by = {r.name: r for r in runs}
    rest = {}
    for name, why in failed.items():
        if why.startswith("DivergenceError"):
            with open(os.path.join(by[name].workdir, DIVERGED), "w") as f:
                f.write(why + "\n")
            log(f"[tune] {name} diverged: counted as an infinite loss")
        else:
            rest[name] = why
    if rest:
        from study.workers import RunsFailed

        raise RunsFailed(f"{len(rest)} tuning run(s) failed, the others finished; fix and re-run to "
                         "resume: " + "; ".join(f"{k}: {v}" for k, v in rest.items()))


def measured(study, workdir: str, cells) -> dict:
    """{cell: (loss, val_loss)} of the finished cells among `cells`."""
    out = {}
    for i, c in enumerate(cells):
        got = read_loss(make_run(study, c, workdir, i))
        if got is not None:
            out[c] = got
    return out


def run_tune(study, workdir: str, dry_run: bool = False, log=_print) -> dict:
    """Train the staged grid (module) in `workdir`, then write DIR/tune/; resumable."""
    os.makedirs(workdir, exist_ok=True)
    seen: dict = {}
    stage = 0
    while True:
        want = all_cells(study, {c: v[0] for c, v in seen.items()})
        found = measured(study, workdir, [c for c in want if c not in seen])
        if found:  # finished earlier (a resumed grid): the stages may move on before anything trains
            seen.update(found)
            continue
        todo = [c for c in want if c not in seen]
        if dry_run:
            runs = [make_run(study, c, workdir, i) for i, c in enumerate(todo)]
            print(plan_lib.dry_run_text(runs))
            print(f"[tune] {len(seen)} cell(s) measured; the later stages depend on these runs' losses "
                  "(python -m study.tune's module docstring)")
            return {"todo": [r.name for r in runs], "measured": len(seen)}
        if not todo:
            break
        stage += 1
        log(f"[tune] round {stage}: {len(todo)} run(s) to train, {len(seen)} measured")
        _train(study, [make_run(study, c, workdir, i) for i, c in enumerate(todo)], workdir, log)
        seen.update(measured(study, workdir, todo))
    return write_outputs(study, workdir, seen, log)


# ---- outputs -------------------------------------------------------------------------------------

def machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.machine()} {model}, {os.cpu_count()} cores, {platform.system()}".strip()


def code_version() -> str:
    try:
        return subprocess.run(["git", "-C", str(plan_lib.REPO), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cell_rows(study, seen: dict) -> list[dict]:
    """One row per cell; best = the lowest seed-0 loss of its (arch, size)."""
    t = study.tune
    best = {}
    for c, (cool, _) in seen.items():
        key = (c.arch, c.size)
        if c.seed == 0 and np.isfinite(cool) and (key not in best or cool < seen[best[key]][0]):
            best[key] = c
    rows = []
    for c in sorted(seen, key=lambda c: (c.arch, n_params_of(study, c.arch, c.size), c.batch, c.beta2, c.k, c.seed)):
        cool, val = seen[c]
        rows.append(dict(arch=c.arch, size=c.size, n_params=int(n_params_of(study, c.arch, c.size)),
                         lr=lr_of(c.k, float(t.lr_base)), batch=c.batch, beta2=c.beta2, seed=c.seed,
                         loss=round(cool, 4) if np.isfinite(cool) else "diverged",
                         val_loss=round(val, 4) if np.isfinite(val) else "diverged",
                         best=int(best.get((c.arch, c.size)) == c)))
    return rows


def _fmt_ci(ci, fmt="{:.3g}") -> str:
    return "" if ci is None else "[" + ", ".join(fmt.format(x) for x in ci) + "]"


def write_outputs(study, workdir: str, seen: dict, log=_print) -> dict:
    from study import tune_plot

    t = study.tune
    out_dir = contract.study_path(workdir, TUNE_DIR)
    os.makedirs(out_dir, exist_ok=True)
    loss = {c: v[0] for c, v in seen.items()}
    fitted = rule_of(study, loss)
    sigma, pairs = tune_fit.seed_sd(loss)
    rows = cell_rows(study, seen)
    with open(os.path.join(out_dir, "cells.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rule = rule_file(study, loss, fitted, sigma, pairs, rows)
    with open(os.path.join(out_dir, "rule.json"), "w") as f:
        json.dump(rule, f, indent=1)
    png = tune_plot.plot_lr(rows, fitted, os.path.join(out_dir, "lr.png"))
    md = summary_md(study, rule, rows)
    with open(os.path.join(out_dir, "cells.md"), "w") as f:
        f.write(md)
    log(md)
    log(f"[tune] wrote {out_dir}/cells.csv, cells.md, rule.json, {os.path.basename(png)}; ship the rule "
        f"with: cp {out_dir}/rule.json linscale_jax/train/tuned_rule.json")
    return {"rule": rule, "rows": rows, "dir": out_dir}


def _law_json(law: dict) -> dict:
    return {k: law[k] for k in ("coefficient", "exponent", "coefficient_ci", "exponent_ci")}


def _sizes_json(f: dict, lr_base: float) -> dict:
    out = {}
    for i, s in enumerate(f["sizes"]):
        o = f["optima"][s]
        out[s] = {"n_params": f["n"][i], "lr_opt": f["lr"]["values"][i], "batch_opt": f["batch"]["values"][i],
                  "lr_opt_ci": f["lr"]["values_ci"][i] if f["lr"]["values_ci"] else None,
                  "batch_opt_ci": f["batch"]["values_ci"][i] if f["batch"]["values_ci"] else None,
                  "lr_edge": o.lr_edge, "batch_edge": o.batch_edge, "best": cell_name(o.best, lr_base),
                  "loss": o.loss}
    return out


def rule_file(study, loss: dict, fitted: dict, sigma: float, pairs: int, rows: list[dict]) -> dict:
    """The rule file (linscale_jax.train.rule): laws per arch, range, data, provenance, cells."""
    t = study.tune
    ref_arch = plan_lib.split_list(study.archs)[0]
    archs = {arch: {"lr": _law_json(f["lr"]), "batch": _law_json(f["batch"]), "beta2": beta2_of(f),
                    "sizes": _sizes_json(f, float(t.lr_base))} for arch, f in fitted.items()}
    for arch, ch in check_summary(study, loss, fitted[ref_arch]).items():
        if arch in archs:
            continue
        if ch["own_rule"]:  # a law through its checked sizes; llama's batch and β2
            own = tune_fit.fit_power_law([v["n_params"] for v in ch["sizes"].values()],
                                         [v["lr_opt"] for v in ch["sizes"].values()], what=f"{arch} lr rule")
            archs[arch] = {"lr": {"coefficient": own.coefficient, "exponent": own.exponent,
                                  "coefficient_ci": None, "exponent_ci": None},
                           "batch": archs[ref_arch]["batch"], "beta2": archs[ref_arch]["beta2"], "check": ch}
        else:
            archs[arch] = {"same_as": ref_arch, "check": ch}
    for arch, entry in archs.items():  # the sizes each arch was tuned or checked at
        ns = list(fitted[arch]["n"]) if arch in fitted else [v["n_params"] for v in entry["check"]["sizes"].values()]
        entry["range"] = {"n_min": min(ns), "n_max": max(ns)}
    cfg = cell_config(study, Cell(ref_arch, sizes_of(study)[0], 0, int(t.batch), float(t.beta2)))
    ns = [n for entry in archs.values() for n in entry["range"].values()]
    return {
        "what": ("AdamW peak learning rate, batch (sequences) and beta2 per arch and size, tuned on a "
                 "grid at a fixed token budget and selected by the loss under the cooldown estimator; "
                 "lr = coefficient * N^exponent, batch likewise rounded to a power of two, "
                 "warmup = warmup_tokens_per_param * N tokens, N non-embedding parameters"),
        "command": "python -m study " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "machine": machine(),
        "code": code_version(),
        "data": {"task": str(cfg.data.task), "vocab": str(cfg.data.vocab), "seq_len": int(cfg.train.seq_len),
                 "tokens": float(study.tokens), "schedule": str(cfg.optim.schedule),
                 "estimator": f"cooldown ({float(study.cooldown.fraction):g} of the steps, {study.cooldown.shape})",
                 "val_batches": int(study.eval.val_batches)},
        "range": {"n_min": min(ns), "n_max": max(ns), "n_count": "non_embedding"},
        "warmup_tokens_per_param": float(t.warmup_tokens_per_param),
        "default": ref_arch,
        "seed_sd": {"value": sigma, "pairs": pairs},
        "archs": archs,
        "cells": rows,
    }


def check_summary(study, loss: dict, ref: dict) -> dict:
    """Per checked arch and size: the rule's rate, the best checked rate (parabola vertex), their
    ratio, and whether the arch gets its own rule (a ratio beyond tune.own_rule_factor)."""
    t = study.tune
    out = {}
    for arch in _names(t.check_archs):
        sizes = {}
        for s in plan_lib.split_list(str(t.check_sizes)):
            cells = [c for c in loss if (c.arch, c.size) == (arch, s)]
            if not cells:
                continue
            n = n_params_of(study, arch, s)
            o = tune_fit.size_optimum(cells, loss)
            lr_opt = float(t.lr_base) * 2.0 ** o.log2_lr
            rule_lr = tune_fit.law_value(ref["lr"], n)
            sizes[s] = {"n_params": n, "rule_lr": rule_lr, "lr_opt": lr_opt, "ratio": lr_opt / rule_lr,
                        "lr_edge": o.lr_edge, "loss": o.loss,
                        "best": cell_name(o.best, float(t.lr_base))}
        if sizes:
            factor = float(t.own_rule_factor)
            out[arch] = {"sizes": sizes, "own_rule": any(not 1 / factor <= v["ratio"] <= factor
                                                         for v in sizes.values())}
    return out


def summary_md(study, rule: dict, rows: list[dict]) -> str:
    """cells.md: the rules with intervals, the per-arch checks, then every cell."""
    lines = ["# Tuning grid", "", f"`{rule['command']}` on {rule['machine']}.", "",
             f"Loss: validation loss (nats per byte) at the budget's end under the {rule['data']['estimator']}"
             f" estimator; {rule['data']['tokens']:.4g} tokens per cell; seed-to-seed sd "
             f"{rule['seed_sd']['value']:.4f} ({rule['seed_sd']['pairs']} replicate pairs), the intervals' noise.", "",
             "| arch | lr* = c·N^e | c [95 %] | e [95 %] | batch* = c·N^e | c [95 %] | e [95 %] | β2 |",
             "|---|---|---|---|---|---|---|---|"]
    for arch, a in rule["archs"].items():
        if "same_as" in a:
            continue
        lr, b = a["lr"], a["batch"]
        lines.append(f"| {arch} | {lr['coefficient']:.3g}·N^{lr['exponent']:+.3f} | {_fmt_ci(lr['coefficient_ci'])} | "
                     f"{_fmt_ci(lr['exponent_ci'], '{:+.3f}')} | {b['coefficient']:.3g}·N^{b['exponent']:+.3f} | "
                     f"{_fmt_ci(b['coefficient_ci'])} | {_fmt_ci(b['exponent_ci'], '{:+.3f}')} | {a['beta2']:g} |")
    lines += ["", "Per size (vertex of the parabola through the best cell and its neighbours; 'edge': the best "
              "was the end of its line, a bound):", "",
              "| arch | size | N | lr* [95 %] | batch* [95 %] | best cell | loss |", "|---|---|---|---|---|---|---|"]
    for arch, a in rule["archs"].items():
        for s, v in a.get("sizes", {}).items():
            lines.append(f"| {arch} | {s} | {v['n_params']:.4g} | {v['lr_opt']:.3g} {_fmt_ci(v['lr_opt_ci'])}"
                         f"{' edge' if v['lr_edge'] else ''} | {v['batch_opt']:.3g} {_fmt_ci(v['batch_opt_ci'])}"
                         f"{' edge' if v['batch_edge'] else ''} | {v['best']} | {v['loss']:.4f} |")
    checks = {arch: a["check"] for arch, a in rule["archs"].items() if "check" in a}
    if checks:
        lines += ["", f"Linear archs checked against {rule['default']}'s rule (own rule when the best rate is "
                  "more than the preset's factor away at a size):", "",
                  "| arch | size | rule lr | best lr | ratio | own rule |", "|---|---|---|---|---|---|"]
        for arch, ch in checks.items():
            for s, v in ch["sizes"].items():
                lines.append(f"| {arch} | {s} | {v['rule_lr']:.3g} | {v['lr_opt']:.3g}{' edge' if v['lr_edge'] else ''}"
                             f" | {v['ratio']:.2f} | {'yes' if ch['own_rule'] else 'no'} |")
    lines += ["", "Every cell (loss under cooldown; val_loss at the last checkpoint; **best** per size):", "",
              "| arch | size | lr | batch | β2 | seed | loss | val_loss |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = "**" if r["best"] else ""
        lines.append(f"| {r['arch']} | {r['size']} | {r['lr']:g} | {r['batch']} | {r['beta2']:g} | {r['seed']} | "
                     f"{mark}{r['loss']}{mark} | {r['val_loss']} |")
    return "\n".join(lines) + "\n"
