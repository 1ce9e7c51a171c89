"""fit.power: the draws' variance split into its checkpoint and seed parts, and the power and MDE of
the verdict's interval under that model, checked against re-runs simulated by brute force."""

import numpy as np
import pytest

from linscale_jax.fit import power


def test_split_recovers_the_checkpoint_and_seed_parts():
    rng = np.random.default_rng(0)
    n, sd, df = 4000, 0.02, 4
    sigma = sd * np.sqrt(df / rng.chisquare(df, n))
    d = 0.1 + rng.standard_normal(n) * np.sqrt(1e-4 + 0.8 * sigma**2)
    m = power.split(d, sigma, sd, df, margin=0.05)
    assert m.v0 == pytest.approx(1e-4, rel=0.25) and m.c == pytest.approx(0.8, rel=0.15)
    assert m.se == pytest.approx(np.sqrt(1e-4 + 0.8 * sd**2), rel=0.1)
    assert power.Model.of(m.json()) == m
    # no seed part known: all of it is checkpoint noise, and a fixed-width normal interval's MDE
    fixed = power.split(0.05 * rng.standard_normal(n))
    assert fixed.c == 0 and power.mde(fixed) == pytest.approx((1.960 + 0.842) * 0.05, rel=0.05)


def _brute_force(effect, m, studies=4000, draws=200, seed=1):
    """Re-runs of the model: the estimate, the measured sd, its draws' 95%/90% intervals, the verdict."""
    rng = np.random.default_rng(seed)
    est = effect + m.se * rng.standard_normal(studies)
    s = m.sd * np.sqrt(rng.chisquare(m.df, studies) / m.df)
    sig = s[:, None] * np.sqrt(m.df / rng.chisquare(m.df, (studies, draws)))
    d = est[:, None] + rng.standard_normal((studies, draws)) * np.sqrt(m.v0 + m.c * sig**2)
    lo, hi, lo90, hi90 = np.percentile(d, [2.5, 97.5, 5, 95], axis=1)
    equivalent = (lo90 > -m.margin) & (hi90 < m.margin)
    return float(np.mean((lo > 0) & ~equivalent))


# at 1 df the sd draws are heavy-tailed: 200 draws' percentiles scatter enough to lift the power of
# small effects by ~5 points, so that case is checked against many draws (the model's limit)
@pytest.mark.parametrize("v0, df, draws", [(2e-5, 4, 200), (0.0, 12, 200), (1e-4, 1, 2000)])
def test_power_matches_brute_force_reruns(v0, df, draws):
    m = power.Model(v0=v0, c=0.7, sd=0.015, df=df, margin=0.05)
    d = power.mde(m)
    assert power.power(d, m) == pytest.approx(0.8, abs=1e-3)
    for effect in (0.5 * d, d, 1.3 * d):
        studies = 4000 if draws <= 200 else 1500
        assert power.power(effect, m) == pytest.approx(_brute_force(effect, m, studies, draws), abs=0.03)
    # more degrees of freedom: a steadier interval, a smaller MDE
    assert power.mde(power.Model(v0, 0.7, 0.015, df + 20, 0.05)) < d
