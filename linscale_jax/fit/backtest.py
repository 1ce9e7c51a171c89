"""Backtesting a ladder's law: fit the k smallest rungs, predict rung k + 1, for every k >= k_min.

    rows = backtest(table, seed_sd=SeedSd(...), k_min=3, n_boot=200, seed=0)   # one arch's table
    table_rows = summary(rows)       # per arch: rungs predicted, mean |error|, RMS error, coverage
    write_csv(rows, "DIR/fit/backtest.csv")

Each step is a held-out prediction (fit.holdout.predict) on the table cut to the k + 1 smallest
sizes with the largest of them held out: approach 3 (bounded) on the k fitted rungs' replicate-mean
curves predicts the next rung's final checkpoint, with a 95% interval for the observed value (refits
on draws with the sizes fixed, plus the predicted run's own seed offset and checkpoint noise). As
OLMo-core's model-ladder rollout and Bhagia et al. (2024) report, the two figures per step are the
error (actual − predicted, nats) and whether the actual value lies inside the interval; a ladder
whose law predicts has errors that do not grow with k and about 95% coverage.
"""

from __future__ import annotations

import csv

import numpy as np

from linscale_jax.fit import bootstrap as bs
from linscale_jax.fit import holdout
from linscale_jax.fit.table import FitError, Table
from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN

CSV_COLUMNS = ("arch", "rungs_fitted", "n_params", "tokens", "predicted", "ci_low", "ci_high", "actual",
               "error", "inside", "failed")
K_MIN = 3  # the fewest rungs a step fits: approach 3 has 5 parameters, 3 sizes pin its N side


def backtest(table: Table, *, seed_sd: bs.SeedSd | None = None, k_min: int = K_MIN, n_boot: int = 200,
             seed: int = 0, flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN) -> list[dict]:
    """One arch: a row per k = k_min .. sizes − 1 (module docstring), each with `arch`,
    `rungs_fitted` (k), `n_params`, `tokens` (the predicted rung's final checkpoint), `predicted`,
    `ci_low`, `ci_high` (None without an interval: more than 10% failed refits), `actual`, `error`
    (actual − predicted), `inside`, `failed` (share of failed refits) and `law` (the k rungs' E, A,
    B, alpha, beta and which sit at their bounds). seed_sd: the study's seed sd with its degrees
    of freedom (default: measured from the table's replicates, all sizes)."""
    arch = str(table.arch[0])
    sizes = np.unique(table.n_params)
    if k_min < 2:
        raise FitError(f"backtest k_min={k_min}: a step fits at least 2 rungs; use k_min >= 2")
    if len(sizes) < k_min + 1:
        raise FitError(f"{arch}: {len(sizes)} size(s); a backtest fitting {k_min} rungs and predicting the next "
                       f"needs at least {k_min + 1}: train more rungs or lower k_min")
    seed_sd = bs.seed_sd_of(bs.curves_of(table)) if seed_sd is None else seed_sd
    rows = []
    for k in range(k_min, len(sizes)):
        cut = table.take(table.n_params <= sizes[k])
        (p,) = holdout.predict(cut, n_boot=n_boot, seed=seed + k, seed_sd=seed_sd, n_held=1,
                               flops_per_param_token=flops_per_param_token)
        f = p.final()
        rows.append(dict(arch=arch, rungs_fitted=k, n_params=f["n_params"], tokens=f["tokens"],
                         predicted=f["predicted"], ci_low=f["ci_low"], ci_high=f["ci_high"], actual=f["actual"],
                         error=f["actual"] - f["predicted"], inside=f["inside"] if f["ci_low"] is not None else None,
                         failed=p.failed, law=p.law))
    return rows


def summary(rows: list[dict]) -> dict:
    """{arch: {"steps", "mean_abs_error", "rms_error", "max_abs_error", "inside", "with_interval",
    "coverage"}} over an arch's backtest rows (coverage: share inside among rows with an interval;
    None when none has one)."""
    out = {}
    for a in dict.fromkeys(r["arch"] for r in rows):
        mine = [r for r in rows if r["arch"] == a]
        err = np.array([r["error"] for r in mine], float)
        judged = [r["inside"] for r in mine if r["inside"] is not None]
        out[a] = dict(steps=len(mine), mean_abs_error=float(np.mean(np.abs(err))),
                      rms_error=float(np.sqrt(np.mean(err**2))), max_abs_error=float(np.max(np.abs(err))),
                      inside=int(sum(judged)), with_interval=len(judged),
                      coverage=float(np.mean(judged)) if judged else None)
    return out


def _cell(x, fmt: str) -> str:
    return "" if x is None else format(x, fmt)


def write_csv(rows: list[dict], path) -> None:
    """backtest.csv: one row per (arch, step); empty interval and `inside` cells where there is no interval."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            w.writerow([r["arch"], r["rungs_fitted"], f"{r['n_params']:.6g}", f"{r['tokens']:.6g}",
                        *(_cell(r[c], ".5f") for c in ("predicted", "ci_low", "ci_high", "actual")),
                        f"{r['error']:+.5f}", "" if r["inside"] is None else str(bool(r["inside"])).lower(),
                        f"{r['failed']:.3f}"])


def read_csv(path) -> list[dict]:
    """write_csv's rows back (numbers as floats, `inside` as bool or None; no `law`)."""
    out = []
    for r in csv.DictReader(open(path, encoding="utf-8")):
        num = {c: (float(r[c]) if r[c] != "" else None) for c in CSV_COLUMNS[2:9]}
        out.append(dict(arch=r["arch"], rungs_fitted=int(r["rungs_fitted"]), **num,
                        inside=None if r["inside"] == "" else r["inside"] == "true", failed=float(r["failed"])))
    return out
