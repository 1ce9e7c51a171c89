"""Planted truth: curves drawn from L(N, D) = E + A/N^alpha + B/D^beta (C = 6ND) with 0.3% noise.

The compute-optimal exponents follow analytically: N_opt ∝ C^(beta/(alpha+beta)),
D_opt ∝ C^(alpha/(alpha+beta)), L_opt(C) - E ∝ C^(-alpha beta/(alpha+beta)).
Tolerances: approach 1 (a staircase over 16 sizes) 0.02 on the N/D exponents, 0.005 on the L(C)
exponent and 0.05 on its floor; approach 2 0.01; approach 3 0.01 on alpha/beta, 0.02 on E and 5% on
A, B.
"""

import numpy as np
import pytest

from linscale_jax.fit import approach1, approach2, approach3, bootstrap, synthetic
from linscale_jax.fit.table import FitError

LAW = synthetic.Law()
EXPECTED = LAW.optimal_exponents()  # N_opt_C 0.5211, D_opt_C 0.4789, L_C_reducible -0.1772


@pytest.fixture(scope="module")
def planted():
    return synthetic.planted_table(LAW, sizes=np.geomspace(1e6, 3e8, 16), seed=1)


def test_approach1_recovers_planted_exponents(planted):
    r = approach1.fit(planted, irreducible=True)
    assert r.laws["N_opt_C"].exponent == pytest.approx(EXPECTED["N_opt_C"], abs=0.02)
    assert r.laws["D_opt_C"].exponent == pytest.approx(EXPECTED["D_opt_C"], abs=0.02)
    # D_opt is the winning run's own tokens, so with C = 6ND the two exponents sum to one.
    assert r.laws["N_opt_C"].exponent + r.laws["D_opt_C"].exponent == pytest.approx(1, abs=1e-9)
    assert r.laws["L_C"].exponent == pytest.approx(EXPECTED["L_C_reducible"], abs=0.005)
    assert r.laws["L_C"].irreducible == pytest.approx(LAW.E, abs=0.05)
    ranges = r.excluded["ranges"]
    assert ranges[0]["n_params"] == planted.n_params.min()
    assert ranges[-1]["n_params"] == planted.n_params.max()
    assert ranges[0]["compute"][0] == pytest.approx(planted.flops.min())
    assert ranges[-1]["compute"][1] == pytest.approx(planted.flops.max())


def test_approach1_clamped_ranges_bias_the_fit_when_kept(planted):
    kept = approach1.fit(planted, irreducible=True, include_clamped=True)
    assert not kept.excluded["applied"]
    # The low-compute range where the smallest run wins lies above the optimal frontier.
    assert kept.laws["L_C"].irreducible > LAW.E + 0.1


def test_approach1_pure_power_law_matches_envelope(planted):
    r = approach1.fit(planted)
    env = r.envelope
    used = env.clamped == 0
    resid = np.log(env.loss[used]) - np.log(r.laws["L_C"](env.compute[used]))
    assert abs(resid.mean()) < 1e-9  # least squares in log space: residuals average to zero
    assert r.laws["L_C"].exponent < 0 and r.laws["L_C"].irreducible is None


def test_approach1_sizes_that_never_bracket_the_optimum():
    # Every run is far too small for its compute: the largest run always wins.
    t = synthetic.planted_table(LAW, sizes=[1e4, 2e4, 4e4], tokens_per_param=(1e3, 1e5))
    with pytest.raises(FitError, match="bracket the optimum"):
        approach1.fit(t)


def test_approach2_recovers_planted_exponents(planted):
    r = approach2.fit(planted)
    assert r.laws["N_opt_C"].exponent == pytest.approx(EXPECTED["N_opt_C"], abs=0.01)
    assert r.laws["D_opt_C"].exponent == pytest.approx(EXPECTED["D_opt_C"], abs=0.01)
    dropped = [d["reason"] for d in r.excluded["dropped"]]
    assert dropped and all("edge" in d or "model size" in d for d in dropped)
    for b in r.budgets:
        if b.status == "ok":  # D_opt is read at the vertex: C = 6 N_opt D_opt on planted data
            assert b.compute == pytest.approx(6 * b.n_opt * b.d_opt, rel=1e-9)


def test_approach3_recovers_planted_parameters(planted):
    r = approach3.fit(planted)
    assert r.alpha == pytest.approx(LAW.alpha, abs=0.01)
    assert r.beta == pytest.approx(LAW.beta, abs=0.01)
    assert r.E == pytest.approx(LAW.E, abs=0.02)
    assert r.A == pytest.approx(LAW.A, rel=0.05)
    assert r.B == pytest.approx(LAW.B, rel=0.05)
    assert r.laws["N_opt_C"].exponent == pytest.approx(EXPECTED["N_opt_C"], abs=0.01)
    # The implied allocation is the argmin of the fitted L(N, C/6N) along a compute budget.
    c = 1e21
    n = np.geomspace(1e7, 1e12, 20001)
    n_best = n[np.argmin(r.predict(n, c / (6 * n)))]
    assert r.laws["N_opt_C"](c) == pytest.approx(n_best, rel=1e-3)
    assert r.laws["L_C"](c) == pytest.approx(r.predict(n_best, c / (6 * n_best)), rel=1e-6)


def test_huber_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    ln_n, ln_d = rng.uniform(14, 22, 50), rng.uniform(18, 26, 50)
    ln_l = np.log(LAW.loss(np.exp(ln_n), np.exp(ln_d))) + 0.002 * rng.standard_normal(50)
    theta = np.array([6.0, 7.5, 0.6, 0.33, 0.36])
    _, grad = approach3.huber_objective(theta, ln_n, ln_d, ln_l)
    for j in range(5):
        h = np.zeros(5)
        h[j] = 1e-7
        fd = (approach3.huber_objective(theta + h, ln_n, ln_d, ln_l)[0]
              - approach3.huber_objective(theta - h, ln_n, ln_d, ln_l)[0]) / 2e-7
        assert grad[j] == pytest.approx(fd, rel=1e-4, abs=1e-10)


def test_bootstrap_resamples_whole_runs_and_is_seeded(planted):
    rng = np.random.default_rng(3)
    resampled = bootstrap.resample_runs(planted, rng)
    originals = {name: run for name, run in planted.runs()}
    labels = sorted(set(resampled.run.tolist()))
    assert len(labels) == len(originals)  # one draw per run, duplicates renamed
    for label in labels:
        rows = resampled.take(resampled.run == label)
        source = originals[label.rsplit("#", 1)[0]]
        np.testing.assert_array_equal(np.sort(rows.loss), np.sort(source.loss))

    def fn(t):
        return approach2.fit(t).params()

    a = bootstrap.bootstrap(planted, fn, 12, seed=5).ci95()
    b = bootstrap.bootstrap(planted, fn, 12, seed=5).ci95()
    assert a == b
    lo, hi = a["N_opt_C.exponent"]
    assert lo < hi and lo - 0.02 < EXPECTED["N_opt_C"] < hi + 0.02


def test_bootstrap_interval_of_approach3_covers_truth(planted):
    point = approach3.fit(planted)
    boot = bootstrap.bootstrap(planted, lambda t: approach3.fit(t, init=point.theta).params(),
                               20, seed=0)
    ci = boot.ci95()
    for k in ("alpha", "beta", "E"):
        lo, hi = ci[k]
        assert lo < point.params()[k] < hi
        assert lo - 0.01 < getattr(LAW, k) < hi + 0.01
