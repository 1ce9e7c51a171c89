"""The recall study's tables: a status per cell, DIR/recall.csv, DIR/recall_runs.csv, the positive
control and what a verdict may use.

    rows = cell_rows(runs, results, study);  write_csv(rows, DIR + "/recall.csv")
    v = verdict_input(DIR + "/recall.csv")   # recall results in shapes where the control passed

Status of a cell (STATUSES), per seed and for the seed "all" row:
  did_not_train  the run's test cross-entropy on the queries stays within study.dnt_margin nats of
                 ln(n_values) (the loss of the values' marginal distribution): it has learnt nothing
                 about the context (any seed that did not train makes the cell's "all" row so);
  copy_level     the 95 % interval's lower end is at or below 1/n_pairs: copying any stored value
                 without binding it to its key scores 1/n_pairs, so the cell shows no recall;
  recall         a recall result (the interval lies above 1/n_pairs).
steps is what a run trained (early stopping at study.stop_accuracy may end it sooner), max_steps
what it was allowed.
Seeds: the "all" row is the mean accuracy over the seeds, with an interval from the lowest to the
highest of the seeds' 95 % Wilson intervals, so it holds both the query noise and the seed spread.
"""

from __future__ import annotations

import csv
import math
from enum import StrEnum

import numpy as np

from linscale_jax.contract import BASELINE_ARCH, split_list

COLUMNS = ("arch", "d_model", "n_pairs", "seq_len", "accuracy", "ci_low", "ci_high", "state_floats",
           "seed", "status", "head_dim", "n_layers", "lr", "steps", "test_loss", "queries", "n_params",
           "variant", "usable_state_floats", "max_steps")
RUN_COLUMNS = ("run", "arch", "d_model", "head_dim", "seed", "lr", "steps", "stopped_early",
               "val_accuracy", "test_loss", "status", "seconds")


class Status(StrEnum):
    """A run's status (TRAINED or DID_NOT_TRAIN) and a cell's (DID_NOT_TRAIN, COPY_LEVEL or RECALL)."""

    TRAINED = "trained"  # a run that learnt to use its context
    DID_NOT_TRAIN = "did_not_train"
    COPY_LEVEL = "copy_level"
    RECALL = "recall"


STATUSES = (Status.DID_NOT_TRAIN, Status.COPY_LEVEL, Status.RECALL)  # a cell's
CONTROL_ARCH, CONTROL_ACCURACY = BASELINE_ARCH, 0.9
FEWER_STEPS = "fewer steps than the control"  # a recall result left out of the verdict


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial proportion k/n."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def did_not_train(test_loss: float, n_values: int, margin: float) -> bool:
    """True when the query cross-entropy is within `margin` nats of ln(n_values) or above it:
    the model predicts the values' marginal distribution and has not used the context."""
    return not test_loss < math.log(n_values) - margin


def cell_status(run_status: str, ci_low: float, n_pairs: int) -> str:
    """did_not_train (the run's status), copy_level (ci_low <= 1/n_pairs) or recall."""
    if run_status == Status.DID_NOT_TRAIN:
        return Status.DID_NOT_TRAIN
    return Status.COPY_LEVEL if not ci_low > 1.0 / n_pairs else Status.RECALL


def accuracy_at(res: dict, steps: int | None) -> tuple[float, int]:
    """(validation accuracy, step) of a run after at most `steps` steps, read from its validation
    history (None or at least the steps it trained: its final accuracy)."""
    hist = [h for h in res.get("history", []) if steps is not None and h["step"] <= steps]
    if steps is None or steps >= res["steps"] or not hist:
        return res["val_accuracy"], res["steps"]
    return hist[-1]["val_accuracy"], hist[-1]["step"]


def best_lr(runs: list, results: dict, stop_accuracy: float, at=lambda label: None) -> dict:
    """{(arch, d, e): lr} with the best mean validation accuracy over the seeds after at(label)
    steps (None: at the end of the run), an accuracy counted at most as stop_accuracy (the early
    stop's target); ties go to the fewer mean steps (the rate that reached the target soonest), then
    to the smaller rate."""
    score = {}
    for r in runs:
        score.setdefault((r.arch, r.d_model, r.head_dim), {}).setdefault(r.lr, []).append(
            accuracy_at(results[r.name], at(r.arch)))
    return {k: max(v, key=lambda lr: (np.mean([min(a, stop_accuracy) for a, _ in v[lr]]),
                                      -np.mean([s for _, s in v[lr]]), -lr))
            for k, v in score.items()}


def cell_rows(runs: list, results: dict, study, chosen: dict | None = None) -> list[dict]:
    """recall.csv rows: per (arch, shape, n_pairs) one row per seed at the chosen lr (best_lr's
    dict; by default each run's final accuracy decides) and the seed "all" row (module doc)."""
    chosen = chosen or best_lr(runs, results, float(study.stop_accuracy))
    seq_len, rows = int(study.seq_len), []
    for (arch, d, e), lr in chosen.items():
        mine = [r for r in runs if (r.arch, r.d_model, r.head_dim, r.lr) == (arch, d, e, lr)]
        for p in split_list(study.n_pairs, "study.n_pairs"):
            seeds = []
            for r in mine:
                res = results[r.name]
                c = res["per_pairs"][p]
                lo, hi = wilson(c["correct"], c["queries"])
                seeds.append(dict(arch=arch, d_model=d, n_pairs=int(p), seq_len=seq_len,
                                  accuracy=c["correct"] / max(c["queries"], 1), ci_low=lo, ci_high=hi,
                                  state_floats=r.state_floats, seed=r.seed,
                                  status=cell_status(res["status"], lo, int(p)), head_dim=e,
                                  n_layers=int(study.n_layers), lr=lr, steps=res["steps"],
                                  test_loss=c["loss"], queries=c["queries"], n_params=r.n_params,
                                  variant=r.variant, usable_state_floats=r.usable_state_floats,
                                  max_steps=r.steps))
            rows += seeds
            lo = min(s["ci_low"] for s in seeds)
            trained = Status.DID_NOT_TRAIN if any(s["status"] == Status.DID_NOT_TRAIN for s in seeds) else Status.TRAINED
            rows.append(dict(seeds[0], seed="all", status=cell_status(trained, lo, int(p)),
                             accuracy=float(np.mean([s["accuracy"] for s in seeds])),
                             ci_low=lo, ci_high=max(s["ci_high"] for s in seeds),
                             steps=int(np.mean([s["steps"] for s in seeds])),
                             test_loss=float(np.mean([s["test_loss"] for s in seeds])),
                             queries=sum(s["queries"] for s in seeds)))
    return rows


def _fmt(v):
    return f"{v:.4f}" if isinstance(v, float) else v


def write_csv(rows: list[dict], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(r[k]) for k in COLUMNS})


def write_runs_csv(runs: list, results: dict, path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RUN_COLUMNS)
        w.writeheader()
        for r in runs:
            res = results[r.name]
            w.writerow({k: _fmt(v) for k, v in dict(
                run=r.name, arch=r.arch, d_model=r.d_model, head_dim=r.head_dim, seed=r.seed, lr=r.lr,
                steps=res["steps"], stopped_early=res["stopped_early"], val_accuracy=res["val_accuracy"],
                test_loss=res["test_loss"], status=res["status"], seconds=res["seconds"]).items()})


def read_csv(path: str) -> list[dict]:
    """recall.csv rows with numeric fields (seed stays a string: an integer or "all"), every value
    checked (study.inputs.recall_rows: one line naming the file and row)."""
    from linscale_jax.study import inputs

    return inputs.recall_rows(path, COLUMNS, STATUSES, Status.DID_NOT_TRAIN)


def control(rows: list[dict]) -> dict:
    """The positive control: the baseline reaches CONTROL_ACCURACY (seed mean) in a recall cell.
    {met, best (its best seed-mean accuracy, None without a baseline cell that trained), cell
    (d_model, head_dim, n_pairs of the best), passed: [(d_model, n_pairs) where it is met]}."""
    ll = [r for r in rows if r["arch"] == CONTROL_ARCH and r["seed"] == "all" and r["status"] != Status.DID_NOT_TRAIN]
    passed = sorted({(r["d_model"], r["n_pairs"]) for r in ll
                     if r["status"] == Status.RECALL and r["accuracy"] >= CONTROL_ACCURACY})
    if not ll:
        return dict(met=False, best=None, cell=None, passed=[])
    top = max(ll, key=lambda r: r["accuracy"])
    return dict(met=bool(passed), best=top["accuracy"], cell=(top["d_model"], top["head_dim"], top["n_pairs"]),
                passed=passed)


def control_sentence(ctl: dict) -> str:
    if ctl["best"] is None:
        return ("Positive control **not met**: no LLaMA cell trained, so the recall comparison is "
                "not measured.")
    d, e, p = ctl["cell"]
    where = ", ".join(f"d {d} at {p} pairs" for d, p in ctl.get("passed", []))
    return (f"Positive control {'met' if ctl['met'] else '**not met**'}: LLaMA's best cell "
            f"(d {d}, {p} pairs) reaches {ctl['best']:.3f} (needed: >= {CONTROL_ACCURACY})"
            + (f"; met in {where}, the shapes whose recall results count." if ctl["met"] else
               ", so the recall comparison is not measured."))


def _shape(row: dict) -> tuple:
    return row["d_model"], row["n_pairs"]


def verdict_input(path: str) -> dict:
    """What a verdict on recall may use, from DIR/recall.csv:
    rows           the seed "all" rows with status "recall" in (d_model, n_pairs) shapes where the
                   positive control passed, allowed at least the steps the control trained there
                   (max_steps: a run that stopped sooner reached study.stop_accuracy; with fewer,
                   the comparison is not at equal training); the baseline's own passing rows
                   included; variant rows (e.g. arch "tnl+short_conv=4") carry their label as arch
                   and `variant`;
    cells          every seed "all" row (study.recall.verdicts: each label against the baseline at
                   equal steps);
    control        control();
    control_steps  the most steps the control trained in a shape where it passed (None: nowhere);
    left_out       [(arch, d_model, head_dim, n_pairs, status)] of every other seed "all" row
                   (did_not_train, copy_level, "no control" or FEWER_STEPS for a recall result);
    did_not_train  [(arch, d_model, head_dim, n_pairs)] of the cells that did not train.
    Without control["met"] the recall comparison is "not measured"."""
    rows = read_csv(path)
    cells = [r for r in rows if r["seed"] == "all"]
    ctl = control(rows)
    ok = set(map(tuple, ctl["passed"]))
    need = {_shape(r): r["steps"] for r in cells if r["arch"] == CONTROL_ARCH and _shape(r) in ok}
    use = [r for r in cells if r["status"] == Status.RECALL and _shape(r) in ok
           and (r["arch"] == CONTROL_ARCH or r["max_steps"] >= need[_shape(r)])]
    kept = {id(r) for r in use}

    def why(r):
        if r["status"] != Status.RECALL:
            return r["status"]
        return "no control" if _shape(r) not in ok else FEWER_STEPS

    return dict(rows=use, cells=cells, control=ctl, control_steps=max(need.values(), default=None),
                left_out=[(r["arch"], r["d_model"], r["head_dim"], r["n_pairs"], why(r)) for r in cells
                          if id(r) not in kept],
                did_not_train=[(r["arch"], r["d_model"], r["head_dim"], r["n_pairs"]) for r in cells
                               if r["status"] == Status.DID_NOT_TRAIN])
