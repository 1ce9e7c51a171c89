"""A ladder's law carried beyond the ladder: the compute-optimal size and the loss of given sizes at
a larger compute, each with a 95% interval.

    ld = holdout.law_draws(curves, arch, rng, n_boot=200, seed_sd=sd)   # the law and its refits
    opt = optimum(ld, compute)                      # N_opt and L at N_opt under C = k N D, intervals
    rows = at_compute(ld, rungs, compute, rng)      # rungs: [{"n_params", "flops_per_token", ...}]

`optimum` is the law's own closed form (approach 3: N_opt = G (C/k)^(β/(α+β)),
G = (αA/(βB))^(1/(α+β))) per refit, so its interval is the refits' spread. `at_compute` gives each
rung the tokens the compute buys at that rung's own FLOPs per token, D = C / flops_per_token, the
law's loss there and the interval for an observed run's loss (fit.holdout.LawDraws.interval: the
refits plus a seed offset and checkpoint noise), and marks the rung the point law puts lowest.
Units: `compute` and flops_per_token in the same FLOPs accounting as the table the law was fitted
on; n_params in the law's parameter count.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.fit.holdout import LawDraws
from linscale_jax.fit.table import FitError
from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN


def _n_opt(theta: np.ndarray, compute: float, k: float) -> np.ndarray:
    """[b] N_opt at `compute` of refits theta [b, 5] (a, b, e, alpha, beta) under C = k N D."""
    a, b, _, al, be = (theta[:, j] for j in range(5))
    g = (al * np.exp(a) / (be * np.exp(b))) ** (1.0 / (al + be))
    return g * (compute / k) ** (be / (al + be))


def optimum(ld: LawDraws, compute: float, k: float = FLOPS_PER_PARAM_TOKEN, level: float = 0.95) -> dict:
    """{"compute", "n_opt", "n_opt_ci", "tokens_opt", "loss_opt", "loss_opt_ci"} of the law at
    `compute` under C = k N D (ci: None when more than 10% of the refits failed)."""
    if compute <= 0:
        raise FitError(f"the compute to predict at must be > 0, got {compute:g}")
    tail = 100 * (1 - level) / 2
    n = float(_n_opt(ld.point.theta[None], compute, k)[0])
    d = compute / (k * n)
    out = dict(compute=float(compute), n_opt=n, tokens_opt=d, loss_opt=float(ld.point.predict(n, d)),
               n_opt_ci=None, loss_opt_ci=None)
    if ld.failed <= 0.10 and len(ld.thetas):
        nb = _n_opt(ld.thetas, compute, k)
        a, b, e, al, be = (ld.thetas[:, j] for j in range(5))
        lb = np.exp(e) + np.exp(a) / nb**al + np.exp(b) / (compute / (k * nb)) ** be
        out["n_opt_ci"] = [float(x) for x in np.percentile(nb, [tail, 100 - tail])]
        out["loss_opt_ci"] = [float(x) for x in np.percentile(lb, [tail, 100 - tail])]
    return out


def at_compute(ld: LawDraws, rungs: list[dict], compute: float, rng: np.random.Generator,
               level: float = 0.95) -> list[dict]:
    """Per rung (a dict with n_params and flops_per_token; other keys are kept): tokens = compute /
    flops_per_token, `predicted` (the point law), `ci_low`, `ci_high` (an observed run's loss; None
    when more than 10% of the refits failed) and `predicted_optimum` (True on the rung whose
    predicted loss is lowest)."""
    if not rungs:
        raise FitError("no rungs to predict at; give at least one {n_params, flops_per_token}")
    rows = []
    for r in rungs:
        n, fpt = float(r["n_params"]), float(r["flops_per_token"])
        if n <= 0 or fpt <= 0:
            raise FitError(f"rung {r}: n_params and flops_per_token must be > 0")
        d = compute / fpt
        ci = ld.interval(n, d, rng, 1, level)
        rows.append(dict(r, tokens=d, flops=float(compute), predicted=float(ld.point.predict(n, d)),
                         ci_low=None if ci is None else float(ci[0][0]),
                         ci_high=None if ci is None else float(ci[1][0])))
    best = int(np.argmin([r["predicted"] for r in rows]))
    for i, r in enumerate(rows):
        r["predicted_optimum"] = i == best
    return rows

