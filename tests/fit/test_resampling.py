"""Resampling with the sizes fixed (fit.bootstrap) and approach 1 on many draws at once
(fit.approach1_draws): the batched path equals the per-draw reference, draws are paired across
archs, and the seed sd's draws follow its scaled inverse-χ²."""

import numpy as np
import pytest

from linscale_jax.fit import bootstrap as bs
from linscale_jax.fit.approach1_draws import fit_draws
from linscale_jax.fit.table import FitError

SIZES = (5e4, 1e5, 1.9e5, 3.2e5)
D = np.linspace(1.3e5, 1.57e6, 12)


def curves(rng, sd=0.03, n=60):
    flops = [6 * s * D for s in SIZES]
    loss = [1 + 25 / s**0.34 + 29 / D**0.28 + rng.normal(0, sd, (n, len(D))) for s in SIZES]
    return flops, loss


@pytest.mark.parametrize("include_clamped", [True, False])
def test_batched_equals_the_reference(include_clamped):
    flops, loss = curves(np.random.default_rng(0))
    at = [flops[2][-1], flops[0][0], 1e-3 * flops[0][0]]  # the last: covered by no run
    a = fit_draws(flops, loss, at, n_params=SIZES, include_clamped=include_clamped)
    b = fit_draws(flops, loss, at, n_params=SIZES, include_clamped=include_clamped, impl="reference")
    assert np.array_equal(a.failed, b.failed) and (a.failed.any() != include_clamped)
    for k in ("coefficient", "exponent", "law_at", "envelope_at"):
        assert np.allclose(getattr(a, k), getattr(b, k), rtol=1e-10, equal_nan=True), k
    assert np.all(np.isnan(a.envelope_at[:, 2])) and np.all(np.isnan(a.law_at[a.failed]))
    with pytest.raises(FitError, match="at least 3 runs"):
        fit_draws(flops[:2], loss[:2], at)


def test_draws_are_paired_and_seed_offsets_independent():
    rng = np.random.default_rng(1)
    lc = np.log(6 * SIZES[0] * D)
    trend = 3 - 0.1 * lc + 0.01 * lc**2
    r = rng.normal(0, 0.02, len(D))
    one = [bs.Curve(SIZES[0], np.exp(lc), D, (trend + r)[None])]
    two = [bs.Curve(SIZES[0], np.exp(lc), D, (trend + 2 * r)[None])]
    d = bs.draw_curves({"a": one, "b": two}, {"a": np.zeros(40), "b": np.zeros(40)}, 40, rng, block=3)
    ra, rb = d["a"][0] - one[0].trend()[0], d["b"][0] - two[0].trend()[0]
    assert np.allclose(rb, 2 * ra) and np.std(ra) > 0.01  # the same residual positions for both
    d = bs.draw_curves({"a": one, "b": one}, {"a": np.full(4000, 0.05), "b": np.full(4000, 0.05)}, 4000, rng)
    off_a, off_b = ((d[k][0] - one[0].trend()[0]).mean(axis=1) for k in ("a", "b"))
    assert abs(np.corrcoef(off_a, off_b)[0, 1]) < 0.1 and np.std(off_a) == pytest.approx(0.05, rel=0.15)


def test_seed_sd_and_residual_noise():
    rng = np.random.default_rng(2)
    lc = np.log(6 * SIZES[0] * D)
    reps = 2.0 - 0.05 * lc + rng.normal(0, 0.04, (6, 1)) + rng.normal(0, 0.001, (6, len(D)))
    c = bs.Curve(SIZES[0], np.exp(lc), D, reps)
    sd = bs.seed_sd_of([c, bs.Curve(SIZES[1], np.exp(lc), D, reps[:1])])
    assert sd.df == 5 and 0.015 < sd.sd < 0.08 and sd.interval()[0] < sd.sd < sd.interval()[1]
    e = np.zeros((20, 60))
    for k in range(1, 60):
        e[:, k] = 0.6 * e[:, k - 1] + rng.normal(0, 0.01, 20)
    x = np.log(np.geomspace(1, 100, 60))
    ar = [bs.Curve(1e5 + i, np.exp(x), np.exp(x), (1 + 0.01 * x + e[i])[None]) for i in range(20)]
    _, rho = bs.residual_noise(ar)
    assert 0.35 < rho < 0.7 and bs.block_length(rho, 60) >= 3 and bs.block_length(0.0, 12) == 1
