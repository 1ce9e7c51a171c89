"""Held-out prediction and lack of fit on planted laws: the interval covers the truth, a wrong law is
flagged (outside the interval, a small lack-of-fit p), two sizes are held out from five on, the seed
sd widens the interval, the bounded fit never fails on a flat size, and the files are written."""

import csv
import json

import numpy as np
import pytest

from linscale_jax import fit
from linscale_jax.fit import holdout
from linscale_jax.fit.bootstrap import SeedSd
from linscale_jax.fit.synthetic import Law, planted_table
from linscale_jax.fit.table import FitError, from_columns

SIZES = np.geomspace(1e6, 1e8, 5)
COLS = ("arch", "run", "step", "n_params", "tokens", "flops")


def test_interval_covers_the_planted_truth():
    law = Law()
    inside = []
    for seed in range(3):
        preds = holdout.predict(planted_table(law, sizes=SIZES, noise=0.01, seed=seed), n_boot=40, seed=seed)
        assert [p.n_params for p in preds] == list(SIZES[-2:])  # 5 sizes: the two largest held out
        for p in preds:
            truth = law.loss(p.n_params, p.tokens)
            assert p.n_sizes_fit == 3 and p.failed <= 0.1
            assert np.all(p.ci_low < p.predicted) and np.all(p.predicted < p.ci_high)
            inside.append(np.mean((truth >= p.ci_low) & (truth <= p.ci_high)))
            assert abs(p.predicted[-1] / truth[-1] - 1) < 0.05  # two sizes beyond the fitted ones
    assert np.mean(inside) >= 0.9  # the truth's curve lies inside the 95% band


def test_wrong_law_is_flagged_and_lacks_fit():
    # The largest size does not follow the law of the smaller ones: its loss is 8% higher.
    t = planted_table(Law(), sizes=SIZES[:4], noise=0.003, seed=0)
    big = t.n_params == SIZES[3]
    bad = from_columns("broken", **{c: getattr(t, c) for c in COLS}, loss=np.where(big, t.loss * 1.08, t.loss))
    (p,) = holdout.predict(bad, n_boot=40)
    assert not p.final()["inside"] and p.actual[-1] > p.ci_high[-1]
    assert np.mean(p.inside) < 0.2
    (good,) = holdout.predict(t, n_boot=40)
    assert good.final()["inside"]
    sd = SeedSd(0.01, 8, "measured")
    five = planted_table(Law(), sizes=SIZES, noise=0.003, seed=0)
    mid = five.n_params == SIZES[2]
    kinked = from_columns("kinked", **{c: getattr(five, c) for c in COLS},
                          loss=np.where(mid, five.loss * 1.05, five.loss))
    bad_law = holdout.full_law(kinked, sd)
    assert bad_law["lack_of_fit"]["p"] < 0.01
    z = [s["z"] for s in bad_law["sizes"]]
    assert int(np.argmax(np.abs(z))) == 2 and z[2] > 2  # the kinked size stands out, above the law
    good = holdout.full_law(five, sd)
    assert good["lack_of_fit"]["p"] > 0.05 and [s["n_params"] for s in good["sizes"]] == list(SIZES)
    assert all(abs(s["z"]) < 2 and s["replicates"] == 1 for s in good["sizes"])


def test_the_seed_sd_widens_the_interval():
    t = planted_table(Law(), sizes=SIZES[:4], noise=0.003, seed=3)
    (a,) = holdout.predict(t, n_boot=20)
    (b,) = holdout.predict(t, n_boot=20, seed_sd=SeedSd(0.05, np.inf, "assumed"))
    (c,) = holdout.predict(t, n_boot=20, seed_sd=SeedSd(0.05, 1, "measured"))
    width = [float(np.mean(x.ci_high - x.ci_low)) for x in (a, b, c)]
    assert width[1] > 2 * width[0] and width[2] > 1.5 * width[1]  # 1 df: the sd itself is uncertain
    assert c.seed_sd["df"] == 1 and b.seed_sd["df"] is None


def test_a_step_between_sizes_stays_bounded_and_too_few_sizes_are_an_error():
    law = Law()
    t = planted_table(law, sizes=SIZES[:4], noise=0.003, seed=4)
    # the loss drops from the smallest size to the next and not beyond: a step, alpha -> infinity
    step = np.where(t.n_params == SIZES[0], law.loss(SIZES[0], t.tokens), law.loss(SIZES[1], t.tokens))
    (p,) = holdout.predict(from_columns("step", **{c: getattr(t, c) for c in COLS}, loss=step), n_boot=20)
    assert p.law["alpha"] == holdout.ALPHA_BOUNDS[1] and p.law["at_bound"] == ["alpha"] and p.failed <= 0.1
    assert np.all(np.isfinite(p.ci_low)) and holdout.predict(t, n_boot=0)[0].law["at_bound"] == []
    with pytest.raises(FitError, match="2 smaller sizes"):
        holdout.predict(planted_table(Law(), sizes=SIZES[:2], seed=0), n_boot=0)


def test_files_and_library_fit(tmp_path):
    t = planted_table(Law(), sizes=SIZES[:4], noise=0.003, seed=1)
    preds = holdout.predict(t, n_boot=10)
    holdout.write_csv(preds, tmp_path / "holdout.csv")
    holdout.write_curves_csv(preds, tmp_path / "curves.csv")
    holdout.plot(tmp_path / "curves.csv", t, tmp_path / "holdout.png")
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


def test_refits_on_a_pool_of_processes_equal_those_in_this_process(monkeypatch):
    """law_draws' refits on fit.pool's processes (two spawned interpreters) return exactly the
    thetas, seed-sd draws and failure share of the same refits run one by one here."""
    from linscale_jax.fit import bootstrap as bs
    from linscale_jax.fit import pool

    curves = bs.curves_of(planted_table(Law(), sizes=SIZES[:3], noise=0.01, seed=0))
    sd = SeedSd(0.01, 8, "measured")

    def draws(cores):
        monkeypatch.setattr(pool, "cores", lambda: cores)
        return holdout.law_draws(curves, "planted", np.random.default_rng(3), n_boot=pool.MIN_ITEMS, seed_sd=sd)

    pool.shutdown()
    here = draws(1)
    assert not pool._pools  # one core: no pool
    pooled = draws(2)
    assert list(pool._pools) == [2]
    pool.shutdown()
    assert len(here.thetas) > 0.9 * pool.MIN_ITEMS
    np.testing.assert_array_equal(pooled.thetas, here.thetas)
    np.testing.assert_array_equal(pooled.sigma, here.sigma)
    assert pooled.failed == here.failed and pooled.point.theta.tolist() == here.point.theta.tolist()


def test_the_pool_bench_runs_and_finds_the_refits_identical():
    """bench/fit_pool.py on its planted table: both ways of refitting give the same LawDraws."""
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "fit_pool.py"
    out = subprocess.run([sys.executable, str(bench), "--n_boot=32", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = json.loads(out.stdout.strip().splitlines()[-1])["rows"]
    assert row["arch"] == "planted" and row["n_boot"] == 32 and row["identical"] is True


def test_checkpoint_noise_is_one_runs_and_a_mean_of_k_runs_carries_it_over_root_k():
    """Sizes of 1 and 4 runs, each run the law plus its own offset plus white checkpoint noise of
    0.02: law_draws estimates one run's noise (a mean of 4 runs shows half of it), and the interval
    of a mean of k runs carries that noise over √k."""
    import dataclasses

    from linscale_jax.fit.bootstrap import Curve

    law, sd, rng = Law(), 0.02, np.random.default_rng(0)
    curves = []
    for i, n in enumerate(SIZES):
        tokens = np.geomspace(2e8, 2e9, 40)
        k = 1 if i < 2 else 4
        runs = law.loss(n, tokens)[None] + rng.normal(0, 0.01, (k, 1)) + rng.normal(0, sd, (k, len(tokens)))
        curves.append(Curve(n_params=float(n), flops=6 * n * tokens, tokens=tokens, loss=runs))
    ld = holdout.law_draws(curves, "llama", rng, n_boot=0, seed_sd=SeedSd(0.01, np.inf, "assumed"))
    assert ld.ckpt_sd == pytest.approx(sd, rel=0.1)  # the mean curves alone would give about 0.015
    flat = dataclasses.replace(ld, thetas=np.repeat(ld.point.theta[None], 400, axis=0), sigma=np.zeros(400),
                               ckpt_sd=sd, failed=0.0)
    n, d = SIZES[-1], np.array([2e9])
    width = {k: float(np.subtract(*flat.interval(n, d, np.random.default_rng(1), replicates=k)[::-1])[0])
             for k in (1, 4)}
    assert width[1] == pytest.approx(2 * 1.96 * sd, rel=0.1)
    assert width[4] / width[1] == pytest.approx(0.5, rel=0.1)
