"""Reproduce published fits on the real data shipped in linscale_jax/fit/data (see each file's .source.md).

Tolerances:
- Chinchilla Fig. 4 (Epoch digitisation, 240 rows after dropping the 5 highest losses), approach 3:
  vs Epoch's grid + L-BFGS-B fit (same objective, same grid): A, B within 0.1%, E, alpha, beta
  within 1e-3, summed Huber within 1e-9; vs Besiroglu et al.'s headline (a Huber-likelihood MLE):
  A, B within 5%, E, alpha, beta within 5e-3; N_opt(5.76e23) within 1% of 7.32e10 and D/N within
  0.2 of 17.9. Bootstrap standard errors (60 resamples of whole runs) within a factor 1.5 of
  Epoch's.
- Porian et al. 2024 optimal pairs: WLS (weights 1/log_n_opt_std^2) of ln n_opt on ln C gives the
  published exponent, its t-exponent and coefficient to 1e-4 (relative 1e-3 for coefficients);
  OLS gives a_unweighted_ols to 1e-4. Approach 2 end to end from the IsoFLOP points: within 0.03.
- Pythia curves (no published law): the envelope flags every compute range as clamped (3 sizes).
"""

import csv
from collections import defaultdict

import numpy as np
import pytest

from linscale_jax.fit import approach1, approach2, approach3, bootstrap, powerlaw, reference
from linscale_jax.fit.table import FitError, from_columns


def _rows(name):
    with open(reference.path(name), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def chinchilla():
    rows = _rows("chinchilla_fig4_epoch.csv")
    loss = np.array([float(r["loss"]) for r in rows])
    n = np.array([float(r["Model Size"]) for r in rows])
    c = np.array([float(r["Training FLOP"]) for r in rows])
    keep = loss < np.sort(loss)[-5]  # Epoch's rule: drop the 5 highest losses
    assert keep.sum() == 240
    n, c, loss = n[keep], c[keep], loss[keep]
    return from_columns("chinchilla_fig4_epoch.csv", arch=["chinchilla"] * 240,
                        run=[str(i) for i in range(240)], step=[1] * 240, n_params=n,
                        tokens=c / (6 * n), flops=c, loss=loss)


@pytest.fixture(scope="module")
def chinchilla_fit(chinchilla):
    return approach3.fit(chinchilla)


def test_chinchilla_approach3_matches_epoch_grid_fit(chinchilla_fit):
    r = chinchilla_fit
    assert r.A == pytest.approx(477.84, rel=1e-3)
    assert r.B == pytest.approx(2143.86, rel=1e-3)
    assert r.E == pytest.approx(1.8172, abs=1e-3)
    assert r.alpha == pytest.approx(0.34731, abs=1e-3)
    assert r.beta == pytest.approx(0.36718, abs=1e-3)
    assert r.objective == pytest.approx(0.0010182740, abs=1e-9)
    assert r.params()["a"] == pytest.approx(0.5139, abs=1e-3)


def test_chinchilla_approach3_matches_besiroglu_headline(chinchilla_fit):
    r = chinchilla_fit
    assert r.A == pytest.approx(482.006, rel=0.05)
    assert r.B == pytest.approx(2085.434, rel=0.05)
    assert r.E == pytest.approx(1.8172, abs=5e-3)
    assert r.alpha == pytest.approx(0.34781, abs=5e-3)
    assert r.beta == pytest.approx(0.36585, abs=5e-3)
    c = 5.76e23
    n_opt = r.laws["N_opt_C"](c)
    assert n_opt == pytest.approx(7.32e10, rel=0.01)
    assert r.laws["D_opt_C"](c) / n_opt == pytest.approx(17.9, abs=0.2)


def test_chinchilla_bootstrap_standard_errors(chinchilla, chinchilla_fit):
    boot = bootstrap.bootstrap(
        chinchilla, lambda t: approach3.fit(t, init=chinchilla_fit.theta).params(), 60, seed=42)
    se = boot.se()
    epoch = {"A": 124.52, "B": 1293.28, "E": 0.02566, "alpha": 0.01540, "beta": 0.02060}
    for k, ref in epoch.items():
        assert ref / 1.5 < se[k] < ref * 1.5, (k, se[k], ref)
    lo, hi = boot.ci95()["alpha"]
    assert lo < chinchilla_fit.alpha < hi


def _porian_groups(name):
    groups = defaultdict(list)
    for r in _rows(name):
        groups[(r["config"], r["dataset"])].append(r)
    return groups


def test_porian_optimal_pairs_reproduce_published_exponents():
    published = {(r["config"], r["dataset"]): r for r in _rows("porian2024_published_fits.csv")}
    groups = _porian_groups("porian2024_optimal_pairs.csv")
    assert set(groups) == set(published) and len(groups) == 15
    for key, rows in groups.items():
        col = {k: np.array([float(r[k]) for r in rows])
               for k in ("flops", "n_opt", "t_opt", "log_n_opt_std", "log_t_opt_std")}
        pub = {k: float(v) for k, v in published[key].items() if k not in (
            "config", "dataset", "hparams", "warmup", "decay", "param_count", "loss_split")}
        n_w = powerlaw.fit_power_law(col["flops"], col["n_opt"], weights=col["log_n_opt_std"] ** -2)
        t_w = powerlaw.fit_power_law(col["flops"], col["t_opt"], weights=col["log_t_opt_std"] ** -2)
        n_ols = powerlaw.fit_power_law(col["flops"], col["n_opt"])
        assert n_w.exponent == pytest.approx(pub["a_published"], abs=1e-4), key
        assert n_w.coefficient == pytest.approx(pub["n_coef_weighted"], rel=1e-3), key
        assert t_w.exponent == pytest.approx(pub["b_weighted"], abs=1e-4), key
        assert t_w.coefficient == pytest.approx(pub["t_coef_weighted"], rel=1e-3), key
        assert n_ols.exponent == pytest.approx(pub["a_unweighted_ols"], abs=1e-4), key
        assert n_ols.coefficient == pytest.approx(pub["n_coef_unweighted_ols"], rel=1e-3), key
        assert pub["a_ci95_lo"] <= n_w.exponent <= pub["a_ci95_hi"], key


def test_porian_approach2_from_isoflop_points():
    published = {(r["config"], r["dataset"]): float(r["a_published"])
                 for r in _rows("porian2024_published_fits.csv")}
    groups = _porian_groups("porian2024_isoflop_points.csv")
    assert len(groups) == 15
    for key, rows in groups.items():
        col = {k: [float(r[k]) for r in rows] for k in ("flops", "n", "t", "loss")}
        r = approach2.fit_points("/".join(key), col["flops"], col["n"], col["t"], col["loss"])
        assert r.laws["N_opt_C"].exponent == pytest.approx(published[key], abs=0.03), key
        for b in r.budgets:  # t = C / (6 n) exactly in this data, so D_opt follows N_opt
            if b.status == "ok":
                assert b.d_opt == pytest.approx(b.compute / (6 * b.n_opt), rel=1e-6)
    rw = groups[("optimizer_tuning_no_decay", "rw")]
    col = {k: [float(r[k]) for r in rw] for k in ("flops", "n", "t", "loss")}
    r = approach2.fit_points("rw", col["flops"], col["n"], col["t"], col["loss"])
    assert r.laws["N_opt_C"].exponent == pytest.approx(0.501, abs=0.002)  # sidecar: 0.501 vs 0.497


def test_pythia_curves_envelope_flags_clamping():
    """Real noisy curves (3 sizes x seeds, no published law): with 3 sizes nothing is bracketed."""
    rows = [r for r in _rows("pythia_small_train_curves_downsampled.csv") if int(r["step"]) >= 100]
    n = np.array([float(r["N_nonembed"]) for r in rows])
    d = np.array([float(r["tokens"]) for r in rows])
    t = from_columns("pythia", arch=["pythia"] * len(rows),
                     run=[f"{r['model']}-s{r['seed']}" for r in rows],
                     step=[r["step"] for r in rows], n_params=n, tokens=d, flops=6 * n * d,
                     loss=[r["loss_smoothed_pm1pct"] for r in rows])
    with pytest.raises(FitError, match="bracket the optimum"):
        approach1.fit(t)
    r = approach1.fit(t, include_clamped=True)
    ranges = r.excluded["ranges"]
    reasons = {(x["n_params"], x["reason"].split(":")[-1].strip()) for x in ranges}
    assert (1189888, "the optimum may be smaller") in reasons  # 14m beats 70m early on
    assert (85056000, "the optimum may be larger") in reasons  # 160m beats 70m later
    assert (85056000, "nothing to compare") in reasons  # past the end of the 70m runs
    assert set(np.unique(r.envelope.n_params)) == {1189888, 18915328, 85056000}
    assert 0 < r.laws["N_opt_C"].exponent < 1 and r.laws["L_C"].exponent < 0
