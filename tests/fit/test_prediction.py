"""A planted law carried 4x beyond its ladder: the best rung of a dense family and its loss inside
their intervals, three rungs' losses inside theirs with the truth's best marked, bad input refused."""

import numpy as np
import pytest

from linscale_jax.fit import bootstrap as bs
from linscale_jax.fit import holdout, prediction
from linscale_jax.fit.synthetic import Law, planted_table
from linscale_jax.fit.table import FitError

SIZES = np.geomspace(1e6, 1e8, 5)


def test_optimum_and_rungs_beyond_the_ladder():
    law = Law()
    t = planted_table(law, sizes=SIZES, noise=0.003, seed=0, points_per_run=12)
    rng = np.random.default_rng(0)
    ld = holdout.law_draws(bs.curves_of(t), "planted", rng, n_boot=40, seed_sd=bs.SeedSd(0.003, 8, "measured"))
    compute = 4 * float(t.flops.max())
    family = [dict(n_params=n, flops_per_token=6 * n) for n in np.geomspace(1e7, 1e10, 61)]
    opt = prediction.optimum(ld, family, compute)
    s = law.alpha + law.beta
    g = (law.alpha * law.A / (law.beta * law.B)) ** (1 / s)
    n_true = g * (compute / 6) ** (law.beta / s)  # the planted law's closed form under C = 6 N D
    step = family[1]["n_params"] / family[0]["n_params"]  # the family's spacing: the interval's resolution
    assert not opt["at_edge"] and opt["n_opt_ci"][0] / step <= n_true <= opt["n_opt_ci"][1] * step
    assert abs(np.log(opt["n_opt"] / n_true)) < 0.5 and opt["tokens_opt"] == pytest.approx(compute / (6 * opt["n_opt"]))
    l_true = law.loss(n_true, compute / (6 * n_true))
    assert opt["loss_opt_ci"][0] < l_true < opt["loss_opt_ci"][1]
    rungs = [dict(n_params=n, flops_per_token=6 * n, size=f"r{i}") for i, n in enumerate(n_true * np.array([0.25, 1, 4]))]
    rows = prediction.at_compute(ld, rungs, compute, rng)
    assert [r["predicted_optimum"] for r in rows] == [False, True, False] and rows[0]["size"] == "r0"
    for r in rows:
        truth = law.loss(r["n_params"], r["tokens"])
        assert r["tokens"] == pytest.approx(compute / r["flops_per_token"]) and r["flops"] == compute
        assert r["ci_low"] < truth < r["ci_high"] and abs(r["predicted"] - truth) < 0.03
    assert prediction.optimum(ld, family[:3], compute)["at_edge"]  # the family stops below the optimum
    with pytest.raises(FitError, match="> 0"):
        prediction.at_compute(ld, [dict(n_params=0, flops_per_token=1)], compute, rng)
    with pytest.raises(FitError, match="no rungs"):
        prediction.optimum(ld, [], compute)
