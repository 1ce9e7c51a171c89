"""Is the irreducible loss E of L(N, D) = E + A/N^alpha + B/D^beta identified by a ladder?

    prof = profile(curves, seed_sd)       # one arch's replicate-mean curves (fit.bootstrap.curves_of)
    prof -> {"grid", "p", "not_rejected": [lo, hi] or None, "identified": bool, "upper": hi or None}

A point fit's E says little where E trades against A and alpha: over one decade of N a power law
with a small exponent is nearly linear in ln N, and a constant moves into A. The profile tests each
E on a grid instead: approach 3 refitted with E fixed (A, B, alpha, beta free, the same bounds and
grid starts as fit.holdout), and that law's per-size mean residuals tested against the seed sd
(fit.holdout.lack_of_fit, on m − 2 df: with E fixed the sizes' means pin only A and alpha). The E
values whose law is not rejected (p > LEVEL) form a 95% confidence set by test inversion.
E is identified when that set excludes E's lower bound (no floor: a pure power law in N and D);
where it does not, the ladder says only that E lies below `upper`, and a law's E is an assumption,
not a measurement (docs/study.md "The laws size by size").
"""

from __future__ import annotations

import numpy as np

from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN
from linscale_jax.fit import approach3, holdout
from linscale_jax.fit import bootstrap as bs

LEVEL = 0.05  # a law with p <= LEVEL is rejected
GRID_POINTS = 12  # E values tested between the lower bound and the lowest loss


def grid(loss_min: float, points: int = GRID_POINTS) -> np.ndarray:
    """[points + 1] E values: the lower bound exp(E_LOG_MIN), then `points` evenly spaced in
    (0, loss_min), the last 2% below the lowest loss."""
    return np.concatenate([[np.exp(holdout.E_LOG_MIN)], np.linspace(0.98, 0.0, points, endpoint=False)[::-1] * loss_min])


def fixed_e_fit(curves: list[bs.Curve], e: float) -> approach3.Result:
    """Approach 3 on the replicate-mean curves with E fixed at `e` (ln E's box closed on it)."""
    t = holdout._table("profile", curves)
    ln_n, ln_d, ln_l = np.log(t.n_params), np.log(t.tokens), np.log(t.loss)
    box = holdout.bounds(float(t.loss.min()))
    box[2] = (float(np.log(e)), float(np.log(e)))
    starts = approach3.default_starts()
    starts[:, 2] = np.log(e)
    th, obj = approach3.minimise(ln_n, ln_d, ln_l, starts, 16, box)
    a, b, ln_e, alpha, beta = (float(v) for v in th)
    return approach3.Result(arch="profile", E=float(np.exp(ln_e)), A=float(np.exp(a)), B=float(np.exp(b)),
                            alpha=alpha, beta=beta, objective=obj, n_points=len(t), n_runs=len(curves),
                            flops_per_param_token=FLOPS_PER_PARAM_TOKEN, laws={})


def profile(curves: list[bs.Curve], seed_sd: bs.SeedSd, points: int = GRID_POINTS) -> dict:
    """The lack-of-fit p of the law at each E of `grid` (module docstring). p is None where the
    seed sd is unmeasured or the sizes are too few (m − 2 < 1): then nothing is rejected or kept."""
    loss_min = float(min(c.mean.min() for c in curves))
    es = grid(loss_min, points)
    ps = []
    for e in es:
        r = fixed_e_fit(curves, float(e))
        late = [float((c.mean - r.predict(c.n_params, c.tokens))[len(c.mean) // 2:].mean()) for c in curves]
        ps.append(holdout.lack_of_fit(late, [c.replicates for c in curves], 2, seed_sd)["p"])
    kept = [float(e) for e, p in zip(es, ps) if p is not None and p > LEVEL]
    tested = all(p is not None for p in ps)
    return dict(grid=[float(e) for e in es], p=ps,
                not_rejected=[min(kept), max(kept)] if kept else None,
                identified=bool(tested and kept and kept[0] > es[0]),
                upper=max(kept) if kept else None)
