"""Backtesting on planted laws: one row per k >= 3 with the next rung predicted inside its interval,
a rung off the law flagged, the CSV round trip, and too short a ladder refused."""

import numpy as np
import pytest

from linscale_jax.fit import backtest
from linscale_jax.fit.bootstrap import SeedSd
from linscale_jax.fit.synthetic import Law, planted_table
from linscale_jax.fit.table import FitError, from_columns

SIZES = np.geomspace(1e6, 1e8, 5)
COLS = ("arch", "run", "step", "n_params", "tokens", "flops")


def test_every_rung_from_the_fourth_is_predicted_inside_its_interval():
    law = Law()
    t = planted_table(law, sizes=SIZES, noise=0.005, seed=0, points_per_run=12)
    rows = backtest.backtest(t, seed_sd=SeedSd(0.005, 8, "measured"), n_boot=30)
    assert [r["rungs_fitted"] for r in rows] == [3, 4] and [r["n_params"] for r in rows] == list(SIZES[3:])
    for r in rows:
        truth = law.loss(r["n_params"], r["tokens"])
        assert r["ci_low"] < r["predicted"] < r["ci_high"] and r["inside"] and r["failed"] <= 0.1
        assert r["ci_low"] < truth < r["ci_high"] and r["error"] == pytest.approx(r["actual"] - r["predicted"])
    s = backtest.summary(rows)["planted"]
    assert s["steps"] == 2 and s["coverage"] == 1.0 and s["max_abs_error"] < 0.1


def test_a_rung_off_the_law_is_flagged(tmp_path):
    t = planted_table(Law(), sizes=SIZES, noise=0.003, seed=1, points_per_run=12)
    off = t.n_params == SIZES[3]  # the fourth rung 6% above the law of the others
    bad = from_columns("off", **{c: getattr(t, c) for c in COLS}, loss=np.where(off, t.loss * 1.06, t.loss))
    rows = backtest.backtest(bad, seed_sd=SeedSd(0.003, 8, "measured"), n_boot=30)
    assert rows[0]["error"] > 0.05 and rows[0]["inside"] is False
    assert backtest.summary(rows)["planted"]["coverage"] < 1
    backtest.write_csv(rows, tmp_path / "backtest.csv")
    back = backtest.read_csv(tmp_path / "backtest.csv")
    assert [r["rungs_fitted"] for r in back] == [3, 4] and back[0]["inside"] is False
    assert back[1]["predicted"] == pytest.approx(rows[1]["predicted"], abs=1e-5)


def test_too_short_a_ladder_is_refused():
    t = planted_table(Law(), sizes=SIZES[:3], seed=0, points_per_run=8)
    with pytest.raises(FitError, match="at least 4"):
        backtest.backtest(t, n_boot=0)
