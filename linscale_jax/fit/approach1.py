"""Approach 1 (the paper's): the envelope of minimum loss over training curves.

Per architecture: each run's ln loss and ln tokens are interpolated linearly in ln compute; on a
log-spaced compute grid the envelope takes, at every grid point, the run with the lowest loss among
the runs whose recorded range covers that compute. That run gives N_opt (its n_params) and D_opt
(its interpolated tokens there). Pure power laws ``y = coefficient * C**exponent`` are fitted in log
space to L(C) (optionally with an irreducible term), N_opt(C) and D_opt(C).

Clamping: where the winning run is the smallest (or largest) of the runs covering that compute, the
true optimum may lie beyond the trained sizes - the point is a bound, not an optimum. Such grid
points are excluded from the N_opt / D_opt fits by default and reported as compute ranges.
Compute is in whatever unit the table's ``flops`` column carries (see Table.with_compute_unit).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from linscale_jax.fit.powerlaw import PowerLaw, fit_power_law, fit_power_law_with_floor
from linscale_jax.fit.table import FitError, Table, log_curves, require

LAWS = ("L_C", "N_opt_C", "D_opt_C")
MOSTLY_BOUNDS = 0.5  # a law whose points are more than half bounds is a bound, not a measured optimum


@dataclasses.dataclass(frozen=True)
class Envelope:
    """The minimum-loss envelope on a compute grid (all arrays [g], g = grid size)."""

    compute: np.ndarray
    loss: np.ndarray
    n_params: np.ndarray
    tokens: np.ndarray
    run: np.ndarray  # winning run name
    clamped: np.ndarray  # int8: 0 bracketed, -1 smallest covering size won, +1 largest won,
    #                      2 only one size reaches this compute


@dataclasses.dataclass(frozen=True)
class Result:
    arch: str
    envelope: Envelope
    laws: dict[str, PowerLaw]  # keys LAWS
    excluded: dict

    def bound_share(self) -> float:
        """Share of the grid points behind N_opt(C) and D_opt(C) that are bounds (clamped points
        kept by include_clamped); 0 when the clamped points were excluded."""
        return 0.0 if self.excluded["applied"] else float(np.mean(self.envelope.clamped != 0))

    def params(self) -> dict[str, float]:
        """Flat parameters (law.param) - what the bootstrap resamples."""
        return {f"{k}.{p}": v for k, law in self.laws.items() for p, v in law.params().items()}


def envelope(table: Table, n_grid: int = 256) -> Envelope:
    """Minimum-loss envelope of one arch's runs on ``n_grid`` log-spaced compute values."""
    require(table, min_runs=3, min_points_per_run=2, what="approach 1 (envelope)")
    curves = log_curves(table)
    lo = min(c[2][0] for c in curves)
    hi = max(c[2][-1] for c in curves)
    grid = np.linspace(lo, hi, n_grid)
    r = len(curves)
    loss = np.full((r, n_grid), np.inf)
    tokens = np.zeros((r, n_grid))
    for i, (_, _, lc, ll, ld) in enumerate(curves):
        inside = (grid >= lc[0] - 1e-12) & (grid <= lc[-1] + 1e-12)
        loss[i, inside] = np.interp(grid[inside], lc, ll)
        tokens[i, inside] = np.interp(grid[inside], lc, ld)
    n_of = np.array([c[1] for c in curves])
    best = np.argmin(loss, axis=0)  # [g]
    covering = np.isfinite(loss)  # [r, g]
    n_cov_min = np.where(covering, n_of[:, None], np.inf).min(axis=0)
    n_cov_max = np.where(covering, n_of[:, None], -np.inf).max(axis=0)
    n_best = n_of[best]
    clamped = np.where(n_cov_min == n_cov_max, 2,
                       np.where(n_best <= n_cov_min, -1, np.where(n_best >= n_cov_max, 1, 0)))
    cols = np.arange(n_grid)
    return Envelope(
        compute=np.exp(grid), loss=np.exp(loss[best, cols]), n_params=n_best,
        tokens=np.exp(tokens[best, cols]), run=np.array([curves[b][0] for b in best], dtype=object),
        clamped=clamped.astype(np.int8))


_REASONS = {
    -1: "the smallest size reaching this compute has the lowest loss: the optimum may be smaller",
    1: "the largest size reaching this compute has the lowest loss: the optimum may be larger",
    2: "only one model size reaches this compute: nothing to compare",
}


def _ranges(env: Envelope, mask: np.ndarray) -> list[dict]:
    """Contiguous grid ranges where ``mask`` holds and the same size wins on the same side."""
    out, i, g = [], 0, len(mask)
    while i < g:
        if not mask[i]:
            i += 1
            continue
        j = i
        while (j + 1 < g and mask[j + 1] and env.n_params[j + 1] == env.n_params[i]
               and env.clamped[j + 1] == env.clamped[i]):
            j += 1
        out.append({
            "compute": [float(env.compute[i]), float(env.compute[j])],
            "run": ",".join(sorted(set(env.run[i:j + 1].tolist()))),
            "n_params": float(env.n_params[i]),
            "reason": _REASONS[int(env.clamped[i])]})
        i = j + 1
    return out


def fit(table: Table, *, irreducible: bool = False, include_clamped: bool = False,
        n_grid: int = 256) -> Result:
    """Approach 1 for one arch (``table`` holds a single arch)."""
    arch = str(table.arch[0])
    env = envelope(table, n_grid)
    use = np.ones(len(env.compute), bool) if include_clamped else env.clamped == 0
    sizes = np.unique(env.n_params[use])
    if len(sizes) < 2:
        raise FitError(
            f"{arch}: after excluding clamped compute ranges only {len(sizes)} model size(s) are "
            "ever optimal; N_opt(C) needs at least 2. Train runs whose sizes bracket the optimum "
            "(smaller and larger than the winners) or pass --include_clamped")
    fit_loss = fit_power_law_with_floor if irreducible else fit_power_law
    laws = {"L_C": fit_loss(env.compute[use], env.loss[use], what=f"{arch}: L(C)")}
    laws["N_opt_C"] = fit_power_law(env.compute[use], env.n_params[use], what=f"{arch}: N_opt(C)")
    laws["D_opt_C"] = fit_power_law(env.compute[use], env.tokens[use], what=f"{arch}: D_opt(C)")
    excluded = {
        "applied": not include_clamped,
        "applies_to": list(LAWS) if not include_clamped else [],
        "grid_points": int(len(env.compute)),
        "grid_points_used": int(use.sum()),
        "ranges": _ranges(env, env.clamped != 0),
    }
    return Result(arch=arch, envelope=env, laws=laws, excluded=excluded)
