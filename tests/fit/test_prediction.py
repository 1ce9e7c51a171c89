"""A planted law carried 4x beyond its ladder: N_opt and the loss there inside their intervals, the
rung the truth puts lowest marked as the predicted optimum, and bad input refused."""

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
    opt = prediction.optimum(ld, compute)
    s = law.alpha + law.beta
    g = (law.alpha * law.A / (law.beta * law.B)) ** (1 / s)
    n_true = g * (compute / 6) ** (law.beta / s)
    assert opt["n_opt_ci"][0] < n_true < opt["n_opt_ci"][1] and abs(np.log(opt["n_opt"] / n_true)) < 0.3
    l_true = law.loss(n_true, compute / (6 * n_true))
    assert opt["loss_opt_ci"][0] < l_true < opt["loss_opt_ci"][1]
    rungs = [dict(n_params=n, flops_per_token=6 * n, size=f"r{i}") for i, n in enumerate(n_true * np.array([0.25, 1, 4]))]
    rows = prediction.at_compute(ld, rungs, compute, rng)
    assert [r["predicted_optimum"] for r in rows] == [False, True, False] and rows[0]["size"] == "r0"
    for r in rows:
        truth = law.loss(r["n_params"], r["tokens"])
        assert r["tokens"] == pytest.approx(compute / r["flops_per_token"])
        assert r["ci_low"] < truth < r["ci_high"] and abs(r["predicted"] - truth) < 0.03
    with pytest.raises(FitError, match="> 0"):
        prediction.at_compute(ld, [dict(n_params=0, flops_per_token=1)], compute, rng)
    with pytest.raises(FitError, match="no rungs"):
        prediction.at_compute(ld, [], compute, rng)
