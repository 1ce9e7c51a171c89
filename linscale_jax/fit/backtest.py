"""Backtesting a ladder's law: fit the k smallest rungs, predict rung k + 1, for every k >= k_min.

    rows = backtest(table, seed_sd=SeedSd(...), k_min=3, n_boot=200, seed=0)   # one arch's table
    table_rows = summary(rows)       # per arch: rungs predicted, mean |error|, RMS error, coverage
    write_csv(rows, "DIR/fit/backtest.csv")
    rows = backtest_tokens(table, factor=4, seed_sd=SeedSd(...))   # in tokens: each run's first quarter

Each step is a held-out prediction (fit.holdout.predict) on the table cut to the k + 1 smallest
sizes with the largest of them held out: approach 3 (bounded) on the k fitted rungs' replicate-mean
curves predicts the next rung's final checkpoint, with a 95% interval for the observed value (refits
on draws with the sizes fixed, plus the predicted run's own seed offset and checkpoint noise). As
OLMo-core's model-ladder rollout and Bhagia et al. (2024) report, the two figures per step are the
error (actual − predicted, nats) and whether the actual value lies inside the interval; a ladder
whose law predicts has errors that do not grow with k and about 95% coverage.

backtest_tokens is the same test along D instead of N: the law fitted on every size's checkpoints up
to 1/factor of its run's tokens predicts each size's final checkpoint, `factor` times further. A
prediction beyond the ladder at `factor` times its compute on the ladder's own sizes (study.predict)
extrapolates in D by that factor, so this is its analogue inside the ladder, at fewer tokens per
parameter.
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


def backtest_tokens(table: Table, *, factor: float = 4.0, seed_sd: bs.SeedSd | None = None, n_boot: int = 200,
                    seed: int = 0, flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN) -> list[dict]:
    """One arch: a row per size (module docstring) with the keys of backtest()'s rows, `rungs_fitted`
    the number of sizes fitted (all) and `tokens_fitted` the size's last fitted checkpoint's tokens.
    Needs, per size, a checkpoint at or below 1/factor of its final tokens, and at least 6 fitted
    points in all (approach 3 has 5 parameters)."""
    arch = str(table.arch[0])
    if factor <= 1:
        raise FitError(f"backtest_tokens factor={factor}: predicting past the fitted tokens needs factor > 1")
    curves = bs.curves_of(table)
    seed_sd = bs.seed_sd_of(curves) if seed_sd is None else seed_sd
    cut = []
    for c in curves:
        m = int(np.sum(c.tokens <= c.tokens[-1] / factor * (1 + 1e-9)))
        if m < 1:
            raise FitError(f"{arch}: size N={c.n_params:.4g} has no checkpoint at or below 1/{factor:g} of its "
                           f"{c.tokens[-1]:.4g} tokens; checkpoint the runs more often or lower the factor")
        cut.append(bs.Curve(c.n_params, c.flops[:m], c.tokens[:m], c.loss[:, :m]))
    if sum(len(c.tokens) for c in cut) < 6 or len(cut) < 2:
        raise FitError(f"{arch}: {sum(len(c.tokens) for c in cut)} checkpoint(s) on {len(cut)} size(s) up to "
                       f"1/{factor:g} of each run; approach 3 needs >= 6 on >= 2 sizes: lower the factor")
    rng = np.random.default_rng(seed)
    ld = holdout.law_draws(cut, arch, rng, n_boot=n_boot, seed_sd=seed_sd, flops_per_param_token=flops_per_param_token)
    rows = []
    for c, f in zip(curves, cut):
        d = float(c.tokens[-1])
        predicted = float(ld.point.predict(c.n_params, np.array([d]))[0])
        ci = ld.interval(c.n_params, np.array([d]), rng, c.replicates)
        lo, hi = (None, None) if ci is None else (float(ci[0][0]), float(ci[1][0]))
        actual = float(c.mean[-1])
        rows.append(dict(arch=arch, rungs_fitted=len(cut), n_params=c.n_params, tokens=d,
                         tokens_fitted=float(f.tokens[-1]), predicted=predicted, ci_low=lo, ci_high=hi,
                         actual=actual, error=actual - predicted,
                         inside=None if lo is None else bool(lo <= actual <= hi), failed=ld.failed, law=ld.law))
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


_FORMATS = {"n_params": ".6g", "tokens": ".6g", "tokens_fitted": ".6g", "predicted": ".5f", "ci_low": ".5f",
            "ci_high": ".5f", "actual": ".5f", "error": "+.5f", "failed": ".3f"}


def _write(rows: list[dict], path, columns: tuple) -> None:
    """`columns` of each row, numbers by _FORMATS; empty cells for a missing interval and its `inside`."""
    def cell(r, c):
        x = r[c]
        if c == "inside":
            return "" if x is None else str(bool(x)).lower()
        return str(x) if c not in _FORMATS else _cell(x, _FORMATS[c])

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows([cell(r, c) for c in columns] for r in rows)


def write_csv(rows: list[dict], path) -> None:
    """backtest.csv: one row per (arch, step); empty interval and `inside` cells where there is no interval."""
    _write(rows, path, CSV_COLUMNS)


TOKENS_CSV_COLUMNS = ("estimator", "arch", "n_params", "tokens_fitted", "tokens", "predicted", "ci_low", "ci_high",
                      "actual", "error", "inside", "failed")


def write_tokens_csv(rows: list[dict], path) -> None:
    """backtest_tokens.csv: backtest_tokens' rows, each with the `estimator` its table was read under."""
    _write(rows, path, TOKENS_CSV_COLUMNS)


def read_csv(path) -> list[dict]:
    """write_csv's rows back (numbers as floats, `inside` as bool or None; no `law`)."""
    out = []
    for r in csv.DictReader(open(path, encoding="utf-8")):
        num = {c: (float(r[c]) if r[c] != "" else None) for c in CSV_COLUMNS[2:9]}
        out.append(dict(arch=r["arch"], rungs_fitted=int(r["rungs_fitted"]), **num,
                        inside=None if r["inside"] == "" else r["inside"] == "true", failed=float(r["failed"])))
    return out
