"""Kaplan's joint form E + ((A/N)^(α/β) + B/D)^β: its gradient, a planted law recovered and carried
beyond its ladder, its compute-optimal allocation, and the choice between it and approach 3 by how
far each misses the ladder's sizes."""

import numpy as np
import pytest

from linscale_jax.fit import bootstrap as bs
from linscale_jax.fit import holdout, kaplan
from linscale_jax.fit.synthetic import Law
from linscale_jax.fit.table import FitError

THETA = np.array([np.log(1e6), np.log(1e6), 0.0, 0.3, 0.5])  # a, b, e, alpha, beta: E = 1
SIZES = np.geomspace(2e4, 2e5, 5)


def truth(n, d):
    a, b, e, al, be = THETA
    return np.exp(e) + ((np.exp(a) / n) ** (al / be) + np.exp(b) / d) ** be


def ladder(loss, noise=0.002, seed=0):
    """A ladder like the main job's: 5 sizes on tokens ∝ 1/N, 12 checkpoints each, two seeds."""
    rng = np.random.default_rng(seed)
    out = []
    for n in SIZES:
        d = np.linspace(1, 12, 12) / 12 * 3e11 / n
        y = loss(n, d)
        out.append(bs.Curve(n_params=float(n), flops=6 * n * d, tokens=d,
                            loss=np.stack([y + rng.normal(0, noise) + rng.normal(0, noise, len(d)) for _ in range(2)])))
    return out


def test_the_gradient_is_the_objectives():
    rng = np.random.default_rng(1)
    ln_n, ln_d = np.log(rng.uniform(2e4, 2e5, 40)), np.log(rng.uniform(1e5, 1e7, 40))
    ln_l = kaplan.log_loss(THETA, ln_n, ln_d) + rng.normal(0, 0.01, 40)
    at = THETA + 0.01
    _, grad = kaplan.huber_objective(at, ln_n, ln_d, ln_l)
    num = [(kaplan.huber_objective(at + h, ln_n, ln_d, ln_l)[0] - kaplan.huber_objective(at - h, ln_n, ln_d, ln_l)[0])
           / 2e-6 for h in np.eye(5) * 1e-6]
    assert grad == pytest.approx(num, rel=1e-4, abs=1e-9)
    assert np.exp(kaplan.log_loss(THETA, ln_n, ln_d)) == pytest.approx(truth(np.exp(ln_n), np.exp(ln_d)))


def test_a_planted_joint_law_is_recovered_carried_beyond_and_chosen():
    curves = ladder(truth)
    form, rms = holdout.choose_form(curves, "planted")
    assert form == "kaplan" and rms["kaplan"] < 0.002 < rms["additive"]
    rng = np.random.default_rng(0)
    ld = holdout.law_draws(curves, "planted", rng, n_boot=24, seed_sd=bs.SeedSd(0.002, 8, "measured"), form="kaplan")
    assert ld.form == "kaplan" and ld.law["form"] == "kaplan" and ld.failed == 0
    n, d = 4e5, 4 * 3e11 / 4e5  # twice the largest size, 4x its tokens: beyond the ladder on both axes
    assert abs(float(ld.point.predict(n, d)) - truth(n, d)) < 0.01
    assert ld.values(n, d).shape == (24, 1)
    assert (ld.values(n, d)[:, 0].min() - 0.01) < truth(n, d) < (ld.values(n, d)[:, 0].max() + 0.01)
    low, high = ld.interval(n, d, rng)
    assert low[0] < truth(n, d) < high[0]
    additive = holdout.law_draws(curves, "planted", rng, n_boot=0, seed_sd=bs.SeedSd(0.002, 8, "measured"))
    assert abs(float(additive.point.predict(n, d)) - truth(n, d)) > abs(float(ld.point.predict(n, d)) - truth(n, d))


def test_the_joint_forms_allocation_is_its_optimum():
    a, b, e, al, be = THETA
    laws = kaplan.allocation_laws(np.exp(e), np.exp(a), np.exp(b), al, be, k=6.0)
    r = kaplan.Result(arch="planted", E=np.exp(e), A=np.exp(a), B=np.exp(b), alpha=al, beta=be, objective=0.0,
                      n_points=0, n_runs=0, flops_per_param_token=6.0, laws=laws)
    c = 1e14
    n = np.geomspace(1e3, 1e8, 20001)
    loss = r.predict(n, c / (6 * n))
    i = int(np.argmin(loss))
    assert laws["N_opt_C"](c) == pytest.approx(n[i], rel=2e-3)
    assert laws["D_opt_C"](c) == pytest.approx(c / (6 * n[i]), rel=2e-3)
    assert laws["L_C"](c) == pytest.approx(loss[i], rel=1e-6)


def test_an_additive_ladder_keeps_approach_3_and_a_bad_form_is_refused():
    law = Law(E=1.0, A=400.0, B=4000.0, alpha=0.34, beta=0.6)
    curves = ladder(lambda n, d: law.loss(n, d))
    form, rms = holdout.choose_form(curves, "planted")
    assert form == "additive" and rms["additive"] < rms["kaplan"]
    assert holdout.choose_form(curves, "planted", "kaplan") == ("kaplan", {})
    with pytest.raises(FitError, match="law form 'chinchilla': pass auto or one of additive, kaplan"):
        holdout.choose_form(curves, "planted", "chinchilla")
