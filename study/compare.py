"""Automatically computed comparisons of a study, each a number with a 95% interval.

    loss_at_common_compute(table, n_boot, seed)   -> {"compute", "by_arch": {arch: [loss, lo, hi]},
                                                        "best", "runner_up", "diff": [d, lo, hi],
                                                        "p_best"}
    law_at_common_compute(table, include_clamped, n_boot, seed) -> the same for each arch's fitted
                                                        L(C) there, + "unfitted": {arch: reason}
    niah_comparison(niah, n_boot, seed)           -> {arch: [acc, lo, hi]}, {"llama-<arch>": [d, lo, hi]}
    probe_comparison(probe)                       -> the same for the line probe (normal approximation)
    checkpoint_sd(table), noise_sd(table, seed_sd)  -> {arch: sd in nats} of one loss point
Intervals: bootstrap over whole runs (the envelope; the laws refitted), over NIAH cells, or the
binomial normal approximation for probe accuracies (independent items). The loss comparisons take
`noise` = {arch: sd}: every bootstrap draw of an arch's value gets an independent normal error of
that sd (checkpoint-to-checkpoint noise measured from the table, plus the seed-to-seed sd measured
by study.noise), so the intervals cover a re-run with another seed, not only another
choice of runs. "resolved" says whether the best-vs-runner-up interval excludes 0.
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
    every run (residual around each run's quadratic trend in ln compute, pooled over runs); NaN when
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
                  else {"sd": float("nan"), "rise": float("nan")})  # runs too short to measure
    return out


def noise_sd(table, seed_sd: float = 0.0) -> dict:
    """Per arch: sd (nats) of one measured loss point = checkpoint noise (+) seed-to-seed sd."""
    return {a: float(np.hypot(np.nan_to_num(v["sd"]), seed_sd)) for a, v in checkpoint_sd(table).items()}


def _add_noise(draws, sd: float, rng) -> np.ndarray:
    draws = np.asarray(draws, float)
    return draws + sd * rng.standard_normal(draws.shape) if sd else draws


def _run_curves(sub):
    return [(name, np.log(r.flops), np.log(r.loss)) for name, r in sub.runs()]


def _envelope_at(curves, log_c: float) -> float:
    vals = [np.interp(log_c, lc, ll) for _, lc, ll in curves if lc[0] - 1e-9 <= log_c <= lc[-1] + 1e-9]
    return float(np.exp(min(vals))) if vals else float("nan")


def common_compute(table) -> float:
    """The largest compute that every arch reaches with at least two runs (so that the envelope
    compares sizes there and a run bootstrap has something to vary); with single-run archs, the
    largest compute every arch reaches."""
    out = []
    for a in table.archs:
        ends = sorted(float(r.flops.max()) for _, r in table.select(a).runs())
        out.append(ends[-2] if len(ends) >= 2 else ends[-1])
    return min(out)


def _ranked(c_star: float, by_arch: dict, draws: dict) -> dict:
    """best / runner_up / diff [d, lo, hi] / p_best (and vs_llama: {arch: [arch − llama, lo, hi]})
    from point values and per-arch bootstrap draws."""
    archs = list(by_arch)
    order = sorted(archs, key=lambda a: by_arch[a][0])
    out = {"compute": c_star, "by_arch": by_arch, "best": order[0],
           "runner_up": order[1] if len(order) > 1 else None, "diff": None}
    if len(order) > 1:
        n = min(len(draws[a]) for a in archs)  # archs are resampled independently: pair draws by index
        m = np.stack([np.asarray(draws[a][:n], float) for a in archs])  # [archs, n]
        d = m[archs.index(order[1])] - m[archs.index(order[0])]
        d = d[np.isfinite(d)]
        diff = by_arch[order[1]][0] - by_arch[order[0]][0]
        out["diff"] = [diff, *(float(x) for x in np.percentile(d, [2.5, 97.5]))] if len(d) else [diff, np.nan,
                                                                                                   np.nan]
        ok = np.isfinite(m).all(axis=0)
        out["p_best"] = float(np.mean(np.argmin(m[:, ok], axis=0) == archs.index(order[0]))) if ok.any() \
            else float("nan")
        out["resolved"] = bool(np.isfinite(out["diff"][1]) and out["diff"][1] > 0)
        if BASELINE_ARCH in archs:  # each arch minus the baseline, paired by draw index
            ref = m[archs.index(BASELINE_ARCH)]
            out["vs_llama"] = {}
            for i, a in enumerate(archs):
                if a != BASELINE_ARCH:
                    d = m[i] - ref
                    d = d[np.isfinite(d)]
                    lo, hi = np.percentile(d, [2.5, 97.5]) if len(d) else (np.nan, np.nan)
                    out["vs_llama"][a] = [by_arch[a][0] - by_arch[BASELINE_ARCH][0], float(lo), float(hi)]
    return out


def _interval(point: float, boot) -> list[float]:
    ok = np.asarray(boot, float)
    ok = ok[np.isfinite(ok)]
    lo, hi = np.percentile(ok, [2.5, 97.5]) if len(ok) else (np.nan, np.nan)
    return [point, float(lo), float(hi)]


def loss_at_common_compute(table, n_boot: int = 200, seed: int = 0, noise: dict | None = None) -> dict:
    """Envelope loss of every arch at `common_compute(table)`, bootstrapping whole runs (+ `noise`)."""
    c_star = common_compute(table)
    rng = np.random.default_rng(seed)
    by_arch, draws = {}, {}
    for a in table.archs:
        curves = _run_curves(table.select(a))
        point = _envelope_at(curves, np.log(c_star))
        draws[a] = np.array([_envelope_at([curves[i] for i in rng.integers(0, len(curves), len(curves))],
                                          np.log(c_star)) for _ in range(n_boot)])
        draws[a] = _add_noise(draws[a], (noise or {}).get(a, 0.0), rng)
        by_arch[a] = _interval(point, draws[a])
    return _ranked(c_star, by_arch, draws)


def law_at_common_compute(table, include_clamped: bool, n_boot: int = 200, seed: int = 0,
                          noise: dict | None = None) -> dict:
    """Each arch's fitted approach-1 law L(C) at `common_compute(table)`, with intervals from refitting
    on run-resampled tables (two-sided, unlike the envelope's), plus `noise`. Archs whose law cannot be fitted are
    left out and listed under "unfitted"."""
    from fit import approach1
    from fit.bootstrap import bootstrap
    from fit.table import FitError

    c_star = common_compute(table)

    def law_at(t) -> dict:
        return {"L": float(approach1.fit(t, include_clamped=include_clamped).laws["L_C"](c_star))}

    by_arch, draws, unfitted = {}, {}, {}
    rng = np.random.default_rng([seed, 7])  # noise draws, one stream for all archs (independent)
    for a in table.archs:
        sub = table.select(a)
        try:
            point = law_at(sub)["L"]
            draws[a] = bootstrap(sub, law_at, n_boot, seed).samples["L"]
            draws[a] = _add_noise(draws[a], (noise or {}).get(a, 0.0), rng)
        except FitError as e:
            unfitted[a] = str(e)
            continue
        by_arch[a] = _interval(point, draws[a])
    out = _ranked(c_star, by_arch, draws) if by_arch else {"compute": c_star, "by_arch": {}}
    out["unfitted"] = unfitted
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
