"""Approach 1 (fit.approach1: the envelope and its L(C) power law) on many loss draws of the same runs.

    d = fit_draws(flops, loss, at, include_clamped=True, impl="batched")
    flops   [k_i] per run: each run's compute at its checkpoints (the same in every draw)
    loss    [n, k_i] per run: n draws of its losses
    at      [q] computes where the law and the envelope are read
    d.coefficient, d.exponent [n]; d.law_at, d.envelope_at [n, q]; d.failed [n] (bool)

A resample that keeps every run and only changes losses leaves the compute grid, each run's
coverage of it and the interpolation weights unchanged, so all n envelopes are one matrix product
and one minimum (`impl="batched"`); `impl="reference"` builds each draw's table and calls
fit.approach1.fit. Both give the same numbers (tests/fit/test_approach1_draws.py). The envelope at a
point of `at` is the lowest loss among the runs whose compute range covers it (ln-ln interpolation),
NaN where none does; a draw fails (NaN values, failed True) where the law cannot be fitted: fewer
than 2 sizes left after excluding clamped grid points.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from linscale_jax.fit import approach1
from linscale_jax.fit.table import FitError, from_columns
from linscale_jax.contract import TABLE_COLUMNS

IMPLS = ("batched", "reference")


@dataclasses.dataclass(frozen=True)
class Draws:
    coefficient: np.ndarray  # [n]
    exponent: np.ndarray  # [n]
    law_at: np.ndarray  # [n, q]
    envelope_at: np.ndarray  # [n, q]
    failed: np.ndarray  # [n] bool


def _weights(lc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """[len(x), len(lc)] linear-interpolation weights of x on the knots lc; rows outside are 0."""
    w = np.zeros((len(x), len(lc)))
    inside = (x >= lc[0] - 1e-12) & (x <= lc[-1] + 1e-12)
    xi = np.clip(x[inside], lc[0], lc[-1])
    j = np.clip(np.searchsorted(lc, xi, side="right") - 1, 0, len(lc) - 2)
    t = (xi - lc[j]) / (lc[j + 1] - lc[j])
    rows = np.flatnonzero(inside)
    w[rows, j] = 1 - t
    w[rows, j + 1] += t
    return w


def _check(flops, loss):
    if len(flops) < 3:
        raise FitError(f"approach 1 (envelope) needs at least 3 runs (model sizes), got {len(flops)}; "
                       "train more sizes or use another approach")
    for f, y in zip(flops, loss):
        if len(f) < 2 or np.any(np.diff(f) <= 0) or y.shape[-1] != len(f):
            raise FitError("approach 1 draws: every run needs >= 2 checkpoints at increasing compute, "
                           "and its loss draws one value per checkpoint")


def _batched(flops, loss, n_params, at, include_clamped, n_grid) -> Draws:
    lcs = [np.log(np.asarray(f, float)) for f in flops]
    grid = np.linspace(min(c[0] for c in lcs), max(c[-1] for c in lcs), n_grid)
    lat = np.log(np.asarray(at, float))
    n = loss[0].shape[0]
    env = np.full((n, len(lcs), n_grid), np.inf)
    env_at = np.full((n, len(lcs), len(lat)), np.inf)
    for i, (lc, y) in enumerate(zip(lcs, loss)):
        ly = np.log(np.maximum(np.asarray(y, float), 1e-300))
        for out, x in ((env, grid), (env_at, lat)):
            w = _weights(lc, x)
            cover = w.sum(axis=1) > 0
            out[:, i, cover] = ly @ w[cover].T
    best = np.argmin(env, axis=1)  # [n, g]
    ln_env = np.take_along_axis(env, best[:, None, :], axis=1)[:, 0]  # [n, g]
    covering = np.isfinite(env[0])  # [r, g], the same in every draw
    n_of = np.asarray(n_params, float)
    n_min = np.where(covering, n_of[:, None], np.inf).min(axis=0)
    n_max = np.where(covering, n_of[:, None], -np.inf).max(axis=0)
    n_best = n_of[best]
    clamped = np.where(n_min == n_max, 2, np.where(n_best <= n_min, -1, np.where(n_best >= n_max, 1, 0)))
    use = np.ones_like(clamped, bool) if include_clamped else clamped == 0
    # the law must rest on >= 2 sizes (approach1.fit's rule)
    won = np.stack([((best == i) & use).any(axis=1) for i in range(len(lcs))], axis=1)  # [n, r]
    failed = sum(won[:, n_of == u].any(axis=1) for u in np.unique(n_of)) < 2
    w = use.astype(float)
    sw = np.maximum(w.sum(axis=1), 1e-300)
    mx = (w * grid).sum(axis=1) / sw
    my = (w * ln_env).sum(axis=1) / sw
    dx = grid[None, :] - mx[:, None]
    slope = (w * dx * (ln_env - my[:, None])).sum(axis=1) / np.maximum((w * dx * dx).sum(axis=1), 1e-300)
    ln_coef = my - slope * mx
    law_at = np.exp(ln_coef[:, None] + slope[:, None] * lat[None, :])
    e_at = np.exp(env_at.min(axis=1))  # inf (no run covers) -> inf
    e_at[~np.isfinite(e_at)] = np.nan
    coef = np.exp(ln_coef)
    for arr in (coef, slope, law_at):
        arr[failed] = np.nan
    return Draws(coefficient=coef, exponent=slope, law_at=law_at, envelope_at=e_at, failed=failed)


def _reference(flops, loss, n_params, at, include_clamped, n_grid) -> Draws:
    n, q = loss[0].shape[0], len(at)
    out = dict(coefficient=np.full(n, np.nan), exponent=np.full(n, np.nan), law_at=np.full((n, q), np.nan),
               envelope_at=np.full((n, q), np.nan), failed=np.zeros(n, bool))
    lat = np.log(np.asarray(at, float))
    for k in range(n):
        cols = {c: [] for c in TABLE_COLUMNS}
        for i, (f, y) in enumerate(zip(flops, loss)):
            cols["arch"] += ["draw"] * len(f)
            cols["run"] += [f"r{i}"] * len(f)
            cols["step"] += list(range(len(f)))
            cols["n_params"] += [n_params[i]] * len(f)
            cols["tokens"] += list(np.asarray(f) / n_params[i])
            cols["flops"] += list(f)
            cols["loss"] += list(y[k])
        for j, x in enumerate(lat):
            vals = [np.interp(x, np.log(f), np.log(y[k])) for f, y in zip(flops, loss)
                    if np.log(f[0]) - 1e-12 <= x <= np.log(f[-1]) + 1e-12]
            out["envelope_at"][k, j] = np.exp(min(vals)) if vals else np.nan
        try:
            law = approach1.fit(from_columns("draw", **cols), include_clamped=include_clamped,
                                n_grid=n_grid).laws["L_C"]
        except FitError:
            out["failed"][k] = True
            continue
        out["coefficient"][k], out["exponent"][k] = law.coefficient, law.exponent
        out["law_at"][k] = law(np.asarray(at, float))
    return Draws(**out)


def fit_draws(flops, loss, at, *, n_params=None, include_clamped: bool = True, n_grid: int = 256,
              impl: str = "batched") -> Draws:
    """Approach 1's L(C) and envelope for n draws of the same runs (module docstring). `n_params`
    [r] (default: ascending order of the runs) only decides which grid points are clamped."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r}; choose one of {IMPLS}")
    loss = [np.atleast_2d(np.asarray(y, float)) for y in loss]
    flops = [np.asarray(f, float) for f in flops]
    _check(flops, loss)
    n_params = list(range(1, len(flops) + 1)) if n_params is None else list(n_params)
    fn = _batched if impl == "batched" else _reference
    return fn(flops, loss, n_params, np.atleast_1d(np.asarray(at, float)), include_clamped, n_grid)
