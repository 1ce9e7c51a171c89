"""A study's smaller comparisons: checkpoint smoothness and the retrieval probes, with 95% intervals.

    checkpoint_sd(table)                  -> {arch: {"sd", "rise"}}: residual around each run's trend
    niah_comparison(niah, n_boot, seed)   -> {arch: [acc, lo, hi]}, {"llama-<arch>": [d, lo, hi]}
    probe_comparison(probe)               -> the same for the line probe (normal approximation)
Intervals: bootstrap over NIAH cells, or the binomial normal approximation for probe accuracies
(independent items). The loss comparisons at equal compute are study.verdicts' (paired draws).
"""

from __future__ import annotations

import numpy as np

from linscale_jax.contract import BASELINE_ARCH


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


def niah_comparison(cells: dict, n_boot: int = 1000, seed: int = 0):
    """cells: arch -> flat array of cell accuracies in [0, 1]. Mean accuracy per arch with a
    bootstrap-over-cells interval, and llama minus each linear arch."""
    rng = np.random.default_rng(seed)
    boots = {a: np.array([rng.choice(v, len(v)).mean() for _ in range(n_boot)]) for a, v in cells.items()}
    per = {a: [float(np.mean(v)), *np.percentile(boots[a], [2.5, 97.5]).tolist()] for a, v in cells.items()}
    diffs = {}
    b = BASELINE_ARCH
    if b in cells:
        for a in cells:
            if a != b:
                d = boots[b] - boots[a]
                diffs[f"{b}-{a}"] = [per[b][0] - per[a][0], *np.percentile(d, [2.5, 97.5]).tolist()]
    return per, diffs


def probe_comparison(acc: dict, n_items: dict):
    """acc: arch -> accuracy, n_items: arch -> items; normal-approximation intervals."""
    per, diffs = {}, {}
    se = {a: float(np.sqrt(max(p * (1 - p), 1e-12) / max(n_items[a], 1))) for a, p in acc.items()}
    for a, p in acc.items():
        per[a] = [p, max(0.0, p - 1.96 * se[a]), min(1.0, p + 1.96 * se[a])]
    b = BASELINE_ARCH
    if b in acc:
        for a in acc:
            if a != b:
                d, s = acc[b] - acc[a], float(np.hypot(se[b], se[a]))
                diffs[f"{b}-{a}"] = [d, d - 1.96 * s, d + 1.96 * s]
    return per, diffs
