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


def test_the_tokens_backtest_predicts_each_run_four_times_further():
    """Along D: the law on each run's first quarter of tokens predicts every size's final checkpoint,
    the truth inside; runs whose loss stops falling after their first quarter miss, above."""
    law = Law()
    t = planted_table(law, sizes=SIZES, noise=0.003, seed=2, points_per_run=12)
    rows = backtest.backtest_tokens(t, factor=4, seed_sd=SeedSd(0.003, 8, "measured"), n_boot=30)
    assert [r["n_params"] for r in rows] == list(SIZES) and all(r["rungs_fitted"] == 5 for r in rows)
    for r in rows:
        assert r["tokens_fitted"] <= r["tokens"] / 4 and r["inside"]
        assert r["ci_low"] < law.loss(r["n_params"], r["tokens"]) < r["ci_high"]
    stall = np.where(t.tokens > 110 * t.n_params, law.loss(t.n_params, 110 * t.n_params), t.loss)
    bad = from_columns("stall", **{c: getattr(t, c) for c in COLS}, loss=stall)
    rows = backtest.backtest_tokens(bad, factor=4, seed_sd=SeedSd(0.003, 8, "measured"), n_boot=30)
    assert all(r["error"] > 0.02 and r["inside"] is False for r in rows)
    with pytest.raises(FitError, match="factor > 1"):
        backtest.backtest_tokens(t, factor=1)
    with pytest.raises(FitError, match="lower the factor"):
        backtest.backtest_tokens(t, factor=1000, n_boot=0)


def test_too_short_a_ladder_is_refused():
    t = planted_table(Law(), sizes=SIZES[:3], seed=0, points_per_run=8)
    with pytest.raises(FitError, match="at least 4"):
        backtest.backtest(t, n_boot=0)


# The main job's design in miniature: 5 rungs of N 6.7e3 .. 1.1e5, 12 checkpoints, the smallest with
# two replicate seeds; seed sd 0.01 (taken as known) and checkpoint noise 0.005 nats around one law.
JOB_SIZES = (6736, 13460, 25250, 50460, 111000)
KNOWN = SeedSd(0.01, np.inf, "known")


def _job(seed):
    from linscale_jax.fit import synthetic_study

    t = synthetic_study.study_table({"llama": 0.0}, sizes=JOB_SIZES, tokens=3.1e6, points=12, ckpt_sd=0.005,
                                    run_sd=0.01, replicates={0: 3}, seed=seed)
    return t, synthetic_study.STUDY_LAW


def test_refits_leave_a_bound_the_point_fit_sits_on():
    """Three rungs whose noise puts the point fit's E on its bound: refits started only there stay
    there (a two-parameter power law, an interval ±0.032 that misses the truth 0.065 above);
    refit_starts lets the draws that want an E reach it, and the interval holds the truth."""
    from linscale_jax.fit import bootstrap as bs, holdout

    t, law = _job(107)
    curves = bs.curves_of(t)
    ld = holdout.law_draws(curves[:3], "llama", np.random.default_rng(0), n_boot=40, seed_sd=KNOWN)
    assert "E" in ld.law["at_bound"]
    at_bound = np.mean(ld.thetas[:, 2] <= holdout.E_LOG_MIN + 1e-3)
    assert 0.2 < at_bound < 0.9  # some refits find an E, some keep the bound
    nxt = curves[3]
    lo, hi = ld.interval(nxt.n_params, nxt.tokens[-1:], np.random.default_rng(1))
    assert lo[0] < law.loss(nxt.n_params, nxt.tokens[-1]) < hi[0]


def test_the_backtest_covers_a_planted_law_at_its_level():
    """k = 3 (three rungs, the hardest step) on 15 planted studies: 15 inside (3 of them with E on
    its bound); with the refits started at the point fit alone and drawn around the sizes' observed
    means, 13 (both misses fits with E on its bound). About 15 s: coverage needs many data seeds."""
    inside = []
    for seed in range(105, 120):
        t, _ = _job(seed)
        (r,) = backtest.backtest(t.take(t.n_params <= JOB_SIZES[3]), seed_sd=KNOWN, n_boot=20, seed=seed)
        inside.append(r["inside"])
    assert sum(inside) >= 14  # 95 % nominal
