"""A study's smaller comparisons: checkpoint smoothness and the retrieval probes, with 95% intervals.

    checkpoint_sd(table)                  -> {arch: {"sd", "rise"}}: residual around each run's trend
    niah_comparison(cells, n_boot, seed)  -> {by_arch: {arch: [acc, lo, hi]}, minus_baseline: {arch:
                                             [llama − arch, lo, hi]}, control, not_measured}
    probe_comparison(acc, n_items, chance) -> the same for the line probe (normal approximation)
Intervals: bootstrap over NIAH cells, or the binomial normal approximation for probe accuracies
(independent items). A comparison needs its positive control (the baseline passes the probe where
a model of its kind can: a needle retrieved, the true line above chance); without it the result
is "not measured" with the reason. The loss comparisons at equal compute are study.verdicts'.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.contract import BASELINE_ARCH

NIAH_CONTROL = 1.0  # the baseline's best cell: one needle retrieved exactly


def residual_sd(x, losses) -> tuple[float, float]:
    """(RMS residual around a quadratic in x, share of successive points that rise), pooled over rows.

    x [k] (e.g. ln step), losses [runs, k]; the residual is scaled for the 3 fitted coefficients."""
    x = np.asarray(x, float)
    res, rises = [], []
    for y in np.asarray(losses, float):
        deg = min(2, len(x) - 2)
        coef = np.polyfit(x, y, deg)
        res.append((y - np.polyval(coef, x)) * np.sqrt(len(x) / (len(x) - deg - 1)))
        rises.append(np.diff(y) > 0)
    return float(np.sqrt(np.mean(np.concatenate(res) ** 2))), float(np.mean(np.concatenate(rises)))


def checkpoint_sd(table) -> dict:
    """Per arch: {"sd": nats, "rise": share} of checkpoint-to-checkpoint noise in the second half of
    every run (residual around each run's quadratic trend in ln compute, pooled over runs); None when
    no run has 4 or more checkpoints in its second half."""
    out = {}
    for a in table.archs:
        res, rises, n = [], [], 0
        for _, r in table.select(a).runs():
            k = len(r.loss) // 2
            if len(r.loss) - k >= 4:
                sd, rise = residual_sd(np.log(r.flops[k:]), r.loss[None, k:])
                m = len(r.loss) - k
                res.append(sd**2 * m)
                rises.append(rise * (m - 1))
                n += m
        out[a] = ({"sd": float(np.sqrt(sum(res) / n)), "rise": float(sum(rises) / (n - len(res)))} if n
                  else {"sd": None, "rise": None})  # runs too short to measure
    return out


def niah_comparison(cells: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    """cells: arch -> flat array of cell accuracies in [0, 1] (a cell's score 1..10 as (s − 1)/9).
    Mean accuracy per arch with a bootstrap-over-cells interval, and the baseline minus each linear
    arch (`minus_baseline`: {arch: [d, lo, hi]}), when the positive control passes: the baseline
    retrieves at least one needle exactly (a cell at 1.0). Otherwise `not_measured` says why, in one
    line: every arch near 0 then says nothing about the archs."""
    rng = np.random.default_rng(seed)
    boots = {a: np.array([rng.choice(v, len(v)).mean() for _ in range(n_boot)]) for a, v in cells.items()}
    per = {a: [float(np.mean(v)), *np.percentile(boots[a], [2.5, 97.5]).tolist()] for a, v in cells.items()}
    b = BASELINE_ARCH
    out = dict(by_arch=per, baseline=b, minus_baseline={}, control=None, not_measured=None)
    if b not in cells:
        out["not_measured"] = f"no {b} run to serve as the positive control"
        return out
    best = float(np.max(cells[b]))
    out["control"] = dict(best_cell=best, needed=NIAH_CONTROL, met=best >= NIAH_CONTROL)
    if not out["control"]["met"]:
        out["not_measured"] = (f"the positive control failed: {b}'s model retrieves no needle exactly, "
                               f"its best cell {best:.2f}, its mean {per[b][0]:.3f}")
        return out
    for a in cells:
        if a != b:
            d = boots[b] - boots[a]
            out["minus_baseline"][a] = [per[b][0] - per[a][0], *np.percentile(d, [2.5, 97.5]).tolist()]
    return out


def probe_comparison(acc: dict, n_items: dict, chance: float = 0.25) -> dict:
    """acc: arch -> accuracy, n_items: arch -> items; normal-approximation intervals, and the
    baseline minus each linear arch when the positive control passes: the baseline's interval lies
    above chance (it has learnt enough of the corpus to tell the true line). Otherwise
    `not_measured` says why, in one line."""
    se = {a: float(np.sqrt(max(p * (1 - p), 1e-12) / max(n_items[a], 1))) for a, p in acc.items()}
    per = {a: [p, max(0.0, p - 1.96 * se[a]), min(1.0, p + 1.96 * se[a])] for a, p in acc.items()}
    b = BASELINE_ARCH
    out = dict(by_arch=per, baseline=b, chance=chance, minus_baseline={}, control=None, not_measured=None)
    if b not in acc:
        out["not_measured"] = f"no {b} run to serve as the positive control"
        return out
    lo, hi = per[b][1:]
    out["control"] = dict(low=lo, chance=chance, met=lo > chance)
    if not out["control"]["met"]:
        out["not_measured"] = (f"the positive control failed: {b}'s model picks the true line at {acc[b]:.2f} "
                               f"[{lo:.2f}, {hi:.2f}] over {n_items[b]} items, not above chance, {chance:.2f}")
        return out
    for a in acc:
        if a != b:
            d, s = acc[b] - acc[a], float(np.hypot(se[b], se[a]))
            out["minus_baseline"][a] = [d, d - 1.96 * s, d + 1.96 * s]
    return out
