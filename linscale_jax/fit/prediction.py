"""A ladder's law carried beyond the ladder: the best size and the losses of sizes at a larger
compute, with 95% intervals.

    ld = holdout.law_draws(curves, arch, rng, n_boot=200, seed_sd=sd)   # the law and its refits
    rows = at_compute(ld, rungs, compute, rng)   # rungs: [{"n_params", "flops_per_token", ...}]
    rows = at_tokens(ld, rungs, tokens, rng)     # the same at each rung's own tokens [r]
    opt = optimum(ld, rungs, compute)            # N_opt: the rung the law puts lowest, and its interval

A rung is a model size of the ladder's shape with its parameter count (in the law's count) and its
training FLOPs per token (in the accounting of the table the law was fitted on); at `compute` it
trains D = compute / flops_per_token tokens. `at_compute` gives each rung the law's loss there and
the interval for an observed run's loss (fit.holdout.LawDraws.interval: the refits plus a seed
offset and checkpoint noise). `optimum` takes the rungs as a dense family of sizes: N_opt is the
rung whose point-law loss is lowest, its interval the spread of that choice over the refits, and
the loss at the optimum the lowest rung loss of each refit. The sizes are the family's, so N_opt
follows the ladder's own FLOPs accounting rather than C = 6 N D.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.fit.holdout import MAX_FAILED, LawDraws
from linscale_jax.fit.table import FitError


def _check(rungs: list[dict], compute: float) -> tuple[np.ndarray, np.ndarray]:
    """(n [r], tokens [r]) of the rungs at `compute`; FitError on bad input."""
    if not rungs:
        raise FitError("no rungs to predict at; give at least one {n_params, flops_per_token}")
    if not compute > 0:
        raise FitError(f"the compute to predict at must be > 0, got {compute!r}")
    n = np.array([float(r["n_params"]) for r in rungs])
    fpt = np.array([float(r["flops_per_token"]) for r in rungs])
    if np.any(n <= 0) or np.any(fpt <= 0):
        raise FitError(f"rung n_params and flops_per_token must be > 0, got {list(zip(n, fpt))}")
    return n, compute / fpt


def at_compute(ld: LawDraws, rungs: list[dict], compute: float, rng: np.random.Generator,
               level: float = 0.95) -> list[dict]:
    """Per rung (its keys kept): tokens, flops (= compute), `predicted` (the point law), `ci_low`,
    `ci_high` (an observed run's loss; None when more than 10% of the refits failed) and
    `predicted_optimum` (True on the rung whose predicted loss is lowest)."""
    n, d = _check(rungs, compute)
    return [dict(r, flops=float(compute)) for r in at_tokens(ld, rungs, d, rng, level)]


def at_tokens(ld: LawDraws, rungs: list[dict], tokens, rng: np.random.Generator, level: float = 0.95,
              replicates: int = 1, target: float | None = None) -> list[dict]:
    """at_compute's rows for rungs that each train their own number of tokens ([r]: e.g. a planned
    run's, rounded up to whole steps): tokens, flops (= flops_per_token · tokens), predicted,
    ci_low, ci_high (for the mean of `replicates` seeds of the run), predicted_optimum; with a
    `target` (nats), p_met: the share of the interval's draws within target of the prediction and
    inside the interval, the chance the check is met if the law's uncertainty is what its draws say."""
    from linscale_jax.fit.holdout import central

    n, _ = _check(rungs, 1.0)
    d = np.asarray(tokens, float)
    if d.shape != n.shape or np.any(d <= 0):
        raise FitError(f"give one positive token count per rung: {len(n)} rung(s), tokens {d.tolist()}")
    rows = []
    for r, ni, di in zip(rungs, n, d):
        predicted = float(ld.point.predict(ni, di))
        x = ld.observed(ni, di, rng, replicates)
        ci = None if x is None else central(x, level)
        row = dict(r, tokens=float(di), flops=float(r["flops_per_token"]) * float(di), predicted=predicted,
                   ci_low=None if ci is None else float(ci[0][0]), ci_high=None if ci is None else float(ci[1][0]))
        if target is not None:
            row["p_met"] = None if x is None else float(np.mean(
                (np.abs(x[:, 0] - predicted) <= target) & (x[:, 0] >= row["ci_low"]) & (x[:, 0] <= row["ci_high"])))
        rows.append(row)
    best = int(np.argmin([r["predicted"] for r in rows]))
    for i, r in enumerate(rows):
        r["predicted_optimum"] = i == best
    return rows


def optimum(ld: LawDraws, rungs: list[dict], compute: float, level: float = 0.95) -> dict:
    """{"compute", "index", "n_opt", "tokens_opt", "loss_opt", "n_opt_ci", "loss_opt_ci"} over a
    family of rungs (module docstring): index of the rung the point law puts lowest (an end of the
    family: the optimum may lie beyond it, `at_edge`); the intervals (None when more than 10% of
    the refits failed) from the refits' own lowest rungs."""
    n, d = _check(rungs, compute)
    point = ld.point.predict(n, d)
    i = int(np.argmin(point))
    out = dict(compute=float(compute), index=i, n_opt=float(n[i]), tokens_opt=float(d[i]), loss_opt=float(point[i]),
               at_edge=i in (0, len(n) - 1) and len(n) > 1, n_opt_ci=None, loss_opt_ci=None)
    if ld.failed <= MAX_FAILED and len(ld.thetas):
        tail = 100 * (1 - level) / 2
        v = ld.values(n, d)  # [b, r]
        out["n_opt_ci"] = [float(x) for x in np.percentile(n[np.argmin(v, axis=1)], [tail, 100 - tail])]
        out["loss_opt_ci"] = [float(x) for x in np.percentile(v.min(axis=1), [tail, 100 - tail])]
    return out
