"""Held-out prediction on planted laws: the interval covers the truth, a wrong law is flagged, the
library call (fit.fit_table) works without argparse, and the files are written."""

import csv
import json

import numpy as np
import pytest

import fit
from fit import holdout
from fit.synthetic import Law, planted_table
from fit.table import FitError, from_columns

SIZES = np.geomspace(1e6, 1e8, 5)


def test_interval_covers_the_planted_truth():
    law = Law()
    inside = []
    for seed in range(4):
        p = holdout.predict(planted_table(law, sizes=SIZES, noise=0.01, seed=seed), n_boot=40, seed=seed)
        truth = law.loss(p.n_params, p.tokens)
        assert p.n_params == SIZES[-1] and p.n_runs_fit == 4
        assert np.all(p.ci_low < p.predicted) and np.all(p.predicted < p.ci_high)
        inside.append(np.mean((truth >= p.ci_low) & (truth <= p.ci_high)))
        assert p.final()["inside"] in (True, False)
        assert abs(p.predicted[-1] / truth[-1] - 1) < 0.03
    assert np.mean(inside) >= 0.9  # the truth's curve lies inside the 95% band


def test_wrong_law_is_flagged():
    # The largest size does not follow the law of the smaller ones: its loss is 8% higher.
    t = planted_table(Law(), sizes=SIZES, noise=0.003, seed=0)
    big = t.n_params == SIZES[-1]
    cols = {c: getattr(t, c) for c in ("arch", "run", "step", "n_params", "tokens", "flops")}
    bad = from_columns("broken", **cols, loss=np.where(big, t.loss * 1.08, t.loss))
    p = holdout.predict(bad, n_boot=40)
    assert not p.final()["inside"] and p.actual[-1] > p.ci_high[-1]
    assert np.mean(p.inside) < 0.2
    good = holdout.predict(t, n_boot=40)
    assert good.final()["inside"]


def test_extra_noise_widens_the_interval():
    t = planted_table(Law(), sizes=SIZES, noise=0.003, seed=3)
    a = holdout.predict(t, n_boot=20)
    b = holdout.predict(t, n_boot=20, extra_sd=0.05)
    assert np.all(b.ci_high - b.ci_low > 2 * (a.ci_high - a.ci_low))


def test_single_size_is_a_clear_error():
    t = planted_table(Law(), sizes=[1e6], seed=0)
    with pytest.raises(FitError, match="same size"):
        holdout.predict(t, n_boot=0)


def test_files_and_library_fit(tmp_path):
    t = planted_table(Law(), sizes=SIZES, noise=0.003, seed=1)
    preds = [holdout.predict(t, n_boot=10)]
    holdout.write_csv(preds, tmp_path / "holdout.csv")
    holdout.write_curves_csv(preds, tmp_path / "curves.csv")
    holdout.plot(preds, {"planted": t}, tmp_path / "holdout.png")
    rows = list(csv.DictReader(open(tmp_path / "holdout.csv")))
    assert list(rows[0]) == list(holdout.CSV_COLUMNS) and len(rows) == 1
    assert float(rows[0]["ci_low"]) <= float(rows[0]["predicted"]) <= float(rows[0]["ci_high"])
    assert (tmp_path / "holdout.png").stat().st_size > 1000
    result = fit.fit_table(t, fit.FitOptions(approach=1, bootstrap=0))
    assert set(result.fits) == {"planted"} and not (tmp_path / "fit").exists()  # writes nothing
    paths = result.write(tmp_path / "fit")
    assert paths[0] == tmp_path / "fit" / "fits.json" and json.loads(paths[0].read_text()) == result.fits
    assert all(p.exists() for p in paths[1:]) and "N_opt_C" in result.summary()
    with pytest.raises(FitError, match="approach must be"):
        fit.FitOptions(approach=4)
