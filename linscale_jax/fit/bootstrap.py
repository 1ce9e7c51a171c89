"""Resampling for intervals: whole runs (the fit library's), and a study's curves with its sizes fixed.

    boot = bootstrap(table, fit_fn, n, seed)         # whole runs drawn with replacement, refitted
    curves = curves_of(table)                        # one arch: a Curve per size (replicates kept)
    sd = seed_sd_of(curves); pooled([sd, ...])       # the seed-to-seed sd with its degrees of freedom
    sd, check = with_prior(sd, prior)                # pooled with other studies' measurement of it
    draws = draw_curves({key: curves}, {key: sigma}, n, rng, block)   # {key: [n, k_i] per size}

**Whole runs.** Checkpoints of one run are strongly correlated, so the unit of resampling is the
run; intervals are 95% percentile intervals (`bootstrap`, used by `python -m linscale_jax.fit`).

**Sizes fixed** (`draw_curves`, the study's verdicts and held-out checks). The ladder is a design,
not a sample, so every draw keeps every size; what a re-run changes is modelled per size i as

    y*_i(k) = T_i(k) + e_i(b(k)) + δ_i,   δ_i ~ N(0, σ*² / r_i),   σ*² ~ scaled-Inv-χ²(ν, s²)

T_i: the quadratic trend in ln C of the replicate-mean curve; e_i: its residuals (scaled by
sqrt(k / (k − 3)) for the three fitted coefficients; none below 4 checkpoints), resampled in moving
blocks b(k) as long as their correlation length; δ_i: a seed offset for the r_i replicates' mean,
whose sd σ* is itself drawn from the measured s with ν degrees of freedom (so the sd's own
uncertainty enters every interval). Draws are paired: every key (arch) shares the block indices of
its size i, so baseline and linear arch see the same checkpoint-noise draw where they share steps.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from linscale_jax.fit.table import FitError, Table

PROGRESS_AFTER_S = 5.0  # bootstrap progress lines only for a fit that takes longer than this


@dataclasses.dataclass(frozen=True)
class Bootstrap:
    samples: dict[str, np.ndarray]  # parameter -> [n_ok] values
    n_requested: int
    n_failed: int
    first_error: str | None

    def ci95(self) -> dict[str, list[float]]:
        return {k: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))]
                for k, v in self.samples.items()}

    def se(self) -> dict[str, float]:
        return {k: float(np.std(v, ddof=1)) for k, v in self.samples.items()}


def resample_runs(table: Table, rng: np.random.Generator) -> Table:
    """A table of len(runs) runs drawn with replacement; repeated draws get distinct run names."""
    names = sorted(set(table.run.tolist()))
    rows = {name: np.flatnonzero(table.run == name) for name in names}
    picks = rng.integers(0, len(names), size=len(names))
    index = np.concatenate([rows[names[p]] for p in picks])
    labels = np.concatenate([[f"{names[p]}#{j}"] * len(rows[names[p]])
                             for j, p in enumerate(picks)])
    out = table.take(index)
    return dataclasses.replace(out, run=labels.astype(object))


def bootstrap(table: Table, fit_fn: Callable[[Table], dict[str, float]], n: int,
              seed: int = 0, progress: Callable[[str], None] | None = None,
              max_failed: float = 0.5) -> Bootstrap:
    """Refit ``fit_fn`` (table -> flat parameter dict) on ``n`` run-resampled tables.

    Resamples on which the fit fails (e.g. no size left that brackets the optimum) are counted in
    ``n_failed`` and left out; more than ``max_failed`` of them failing is an error. ``progress``
    receives a line with the count and ETA about every tenth of the way, once the resamples have
    taken longer than PROGRESS_AFTER_S.
    """
    if n < 2:
        raise FitError(f"bootstrap needs at least 2 resamples, got {n}; use --bootstrap 0 to skip")
    rng = np.random.default_rng(seed)
    values: dict[str, list[float]] = {}
    failed, first_error = 0, None
    start = time.monotonic()
    for i in range(n):
        spent = time.monotonic() - start
        if progress and i and i % max(1, n // 10) == 0 and spent > PROGRESS_AFTER_S:
            progress(f"bootstrap {i}/{n} resamples, {spent:.0f}s, ETA {spent * (n - i) / i:.0f}s")
        try:
            params = fit_fn(resample_runs(table, rng))
        except FitError as e:
            failed += 1
            first_error = first_error or str(e)
            continue
        for k, v in params.items():
            values.setdefault(k, []).append(v)
    if failed > int(n * max_failed):
        raise FitError(f"{failed} of {n} bootstrap resamples could not be fitted (first: "
                       f"{first_error}); add runs so a resample still brackets the optimum, or "
                       "use --bootstrap 0")
    return Bootstrap({k: np.asarray(v) for k, v in values.items()}, n, failed, first_error)


# ---- sizes fixed: a study's curves --------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Curve:
    """One size of one arch: its replicate runs' losses on their common checkpoints."""

    n_params: float
    flops: np.ndarray  # [k]
    tokens: np.ndarray  # [k]
    loss: np.ndarray  # [r, k], r replicate seeds

    @property
    def mean(self) -> np.ndarray:
        return self.loss.mean(axis=0)

    @property
    def replicates(self) -> int:
        return int(self.loss.shape[0])

    def trend(self) -> tuple[np.ndarray, np.ndarray]:
        """(quadratic trend in ln C of the mean curve [k], residuals [k] scaled for the 3 fitted
        coefficients); below 4 checkpoints the trend is the curve and the residuals are 0."""
        y = self.mean
        k = len(y)
        if k < 4:
            return y.copy(), np.zeros_like(y)
        x = np.log(self.flops)
        t = np.polyval(np.polyfit(x, y, 2), x)
        return t, (y - t) * np.sqrt(k / (k - 3))


def curves_of(table: Table) -> list[Curve]:
    """One arch's table -> a Curve per size (ascending N), its runs on the steps they all have."""
    out = []
    for n in np.unique(table.n_params):
        at = table.take(table.n_params == n)
        runs = sorted(set(at.run.tolist()))
        steps = sorted(set.intersection(*(set(at.step[at.run == r].tolist()) for r in runs)))
        if len(steps) < 1:
            raise FitError(f"{at.arch[0]}: the runs of size N={n:.4g} share no checkpoint step; "
                           "evaluate the replicates at the same steps")
        loss, fl, tk = [], None, None
        for r in runs:
            rr = at.take(at.run == r)
            idx = [int(np.flatnonzero(rr.step == s)[0]) for s in steps]
            loss.append(rr.loss[idx])
            fl, tk = rr.flops[idx], rr.tokens[idx]
        order = np.argsort(fl, kind="stable")
        out.append(Curve(float(n), np.asarray(fl, float)[order], np.asarray(tk, float)[order],
                         np.asarray(loss, float)[:, order]))
    return out


@dataclasses.dataclass(frozen=True)
class SeedSd:
    """A seed-to-seed sd of one run's loss (nats) with its degrees of freedom (df = inf: assumed,
    taken as known; df = 0: nothing measured, sd 0)."""

    sd: float
    df: float
    source: str

    def interval(self, level: float = 0.95) -> tuple[float, float] | None:
        """Interval for the true sd: s·sqrt(ν/χ²_ν) at the two tails; None unless measured."""
        if not (0 < self.df < np.inf):
            return None
        from scipy import stats

        tail = (1 - level) / 2
        hi, lo = stats.chi2.ppf([tail, 1 - tail], self.df)
        return float(self.sd * np.sqrt(self.df / lo)), float(self.sd * np.sqrt(self.df / hi))

    def draws(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """[n] draws of the true sd: sd·sqrt(ν/χ²_ν) (the scaled inverse-χ² of σ²), or sd itself
        when df is inf or 0."""
        if not (0 < self.df < np.inf):
            return np.full(n, float(self.sd))
        return self.sd * np.sqrt(self.df / rng.chisquare(self.df, n))

    @classmethod
    def of(cls, d: dict) -> "SeedSd":
        """The SeedSd that json() wrote (df None: assumed, inf)."""
        return cls(float(d["sd"]), np.inf if d.get("df") is None else float(d["df"]), d.get("source", ""))

    def json(self) -> dict:
        ci = self.interval()
        return dict(sd=float(self.sd), df=None if not np.isfinite(self.df) else float(self.df),
                    ci95=None if ci is None else list(ci), source=self.source)


def seed_sd_of(curves: list[Curve]) -> SeedSd:
    """The sd over seeds of each replicate's mean over the second half of its checkpoints, pooled
    over the replicated sizes: df = sum of (replicates − 1); df 0 without replicates."""
    ss, df = 0.0, 0
    for c in curves:
        if c.replicates >= 2:
            late = c.loss[:, c.loss.shape[1] // 2:].mean(axis=1)
            ss += float(np.sum((late - late.mean()) ** 2))
            df += c.replicates - 1
    if not df:
        return SeedSd(0.0, 0, "no replicates")
    return SeedSd(float(np.sqrt(ss / df)), df, f"measured: {df} df")


def pooled(sds: list[SeedSd]) -> SeedSd:
    """One sd from several measured ones (df-weighted variances, df summed); unmeasured ones skipped."""
    m = [s for s in sds if 0 < s.df < np.inf]
    df = sum(s.df for s in m)
    if not df:
        return SeedSd(0.0, 0, "no replicates")
    return SeedSd(float(np.sqrt(sum(s.df * s.sd**2 for s in m) / df)), df, f"pooled: {len(m)} archs, {df:g} df")


def with_prior(own: SeedSd, prior: SeedSd | None, alpha: float = 0.05) -> tuple[SeedSd, dict | None]:
    """(The seed sd the intervals use, the check of `prior` or None.) `own`: the study's pooled
    measured sd; `prior`: a measurement of the same protocol's sd by other studies. Both measured:
    pooled (df-weighted variances, df summed) unless an F test of own against prior rejects one sd
    at `alpha` (two-sided), then own alone. Own unmeasured (no replicates, or only assumed): the
    prior. No measured prior: own, check None. The check: {"prior", "f", "p", "used"}."""
    if prior is None or not (0 < prior.df < np.inf):
        return own, None
    if not (0 < own.df < np.inf):
        check = dict(prior=prior.json(), f=None, p=None, used=True)
        return SeedSd(prior.sd, prior.df, f"prior: {prior.source}"), check
    from scipy import stats

    f = (own.sd / prior.sd) ** 2 if prior.sd > 0 else np.inf
    p = float(min(1.0, 2 * min(stats.f.cdf(f, own.df, prior.df), stats.f.sf(f, own.df, prior.df))))
    check = dict(prior=prior.json(), f=float(f), p=p, used=p >= alpha)
    if not check["used"]:
        return SeedSd(own.sd, own.df, f"{own.source}; prior {prior.sd:.4f} ({prior.df:g} df) rejected, "
                                      f"F test p {p:.2g}"), check
    both = pooled([own, prior])
    return SeedSd(both.sd, both.df, f"{own.source} + prior {prior.df:g} df ({prior.source}; F test p {p:.2g})"), check


def bartlett(sds: list[SeedSd]) -> float | None:
    """Bartlett's test that measured sds share one true sd: its p (χ² on k − 1 df), None below two."""
    m = [s for s in sds if 0 < s.df < np.inf and s.sd > 0]
    if len(m) < 2:
        return None
    from scipy import stats

    df = np.array([s.df for s in m], float)
    var = np.array([s.sd**2 for s in m], float)
    sp = float(np.sum(df * var) / df.sum())
    c = 1 + (np.sum(1 / df) - 1 / df.sum()) / (3 * (len(m) - 1))
    stat = (df.sum() * np.log(sp) - np.sum(df * np.log(var))) / c
    return float(stats.chi2.sf(stat, len(m) - 1))


def ar1(residuals: list[np.ndarray]) -> tuple[float, float]:
    """(RMS, lag-1 autocorrelation) of residual series, pooled; (0, 0) without any."""
    res = [np.asarray(r, float) for r in residuals if len(r) >= 2]
    if not res:
        return 0.0, 0.0
    sd = float(np.sqrt(np.mean(np.concatenate(res) ** 2)))
    num = sum(float(np.sum(r[1:] * r[:-1])) for r in res)
    den = sum(float(np.sum(r * r)) for r in res)
    return sd, float(num / den) if den > 0 else 0.0


def residual_noise(curves: list[Curve]) -> tuple[float, float]:
    """ar1 of the trend residuals of the sizes with >= 4 checkpoints; (0, 0) when none has."""
    return ar1([c.trend()[1] for c in curves if len(c.flops) >= 4])


def block_length(rho: float, k: int) -> int:
    """Moving-block length for residuals with lag-1 autocorrelation rho: the correlation length
    (1 + ρ)/(1 − ρ) of an AR(1), between 1 and k // 2."""
    rho = float(np.clip(rho, 0.0, 0.95))
    return int(np.clip(round((1 + rho) / (1 - rho)), 1, max(1, k // 2)))


def _block_indices(rng: np.random.Generator, n: int, k: int, block: int) -> np.ndarray:
    """[n, k] moving-block bootstrap positions of a length-k series."""
    block = max(1, min(block, k))
    m = -(-k // block)
    starts = rng.integers(0, k - block + 1, (n, m))
    return (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(n, m * block)[:, :k]


def draw_curves(curves: dict, sigma: dict, n: int, rng: np.random.Generator, block: int = 1,
                trends: dict | None = None) -> dict:
    """{key: [Curve per size]} -> {key: [[n, k_i] loss draws per size]} (module docstring).

    sigma: {key: [n] seed-sd draws}. Keys share the residual block positions of size i (paired);
    seed offsets are independent per key and size. trends: {key: [(trend [k], residuals [k]) per
    size]} in place of each Curve.trend() (e.g. a fitted law, fit.holdout.law_draws)."""
    sizes = max(len(c) for c in curves.values())
    idx = {}
    for i in range(sizes):
        for k in sorted({len(c[i].flops) for c in curves.values() if i < len(c)}):
            idx[i, k] = _block_indices(rng, n, k, block)
    out = {}
    for key, cs in curves.items():
        draws = []
        for i, c in enumerate(cs):
            t, r = c.trend() if trends is None else trends[key][i]
            y = t[None, :] + r[idx[i, len(t)]]
            y = y + (sigma[key] / np.sqrt(c.replicates) * rng.standard_normal(n))[:, None]
            draws.append(np.maximum(y, 1e-6))
        out[key] = draws
    return out
