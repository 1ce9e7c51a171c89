"""study.verdicts: four outcomes that can fail, from any checkpoint table (synthetic tables with a
known answer), paired draws with the sizes fixed, the seed sd with its degrees of freedom, the
failed share, the measured difference beside the fitted one, and the command line."""

import json

import numpy as np
import pytest

from linscale_jax.fit.synthetic_study import study_table
from linscale_jax.study.scaling import verdicts

LIN = ("tnl", "hgrn2")
SIZES = (5e4, 1e5, 1.9e5, 3.2e5)  # the cpu preset's four ladder sizes


def table(offsets, seed, ckpt_sd=0.005, run_sd=0.01, points=6, replicates=None):
    return study_table(offsets, sizes=SIZES, tokens=1.57e6, points=points, ckpt_sd=ckpt_sd, run_sd=run_sd,
                       replicates={0: 2} if replicates is None else replicates, seed=seed)


def test_outcome_four_ways_with_failed_share_and_detectable_effect():
    rng = np.random.default_rng(0)
    n = rng.standard_normal(2000)
    assert verdicts.outcome(0.01 * n, 0.05)["verdict"] == "equivalent"
    assert verdicts.outcome(-0.2 + 0.02 * n, 0.05)["verdict"] == "better"
    assert verdicts.outcome(0.2 + 0.02 * n, 0.05)["verdict"] == "worse"
    assert verdicts.outcome(0.1 * n, 0.05)["verdict"] == "not_resolved"
    # a small resolved difference inside the margin is equivalent (TOST), not better
    assert verdicts.outcome(-0.02 + 0.005 * n, 0.05)["verdict"] == "equivalent"
    assert verdicts.outcome(-0.02 + 0.005 * n, 0.01)["verdict"] == "better"
    # normal draws: MDE = (1.96 + 0.84) sd, the 90% half-width 1.645 sd
    r = verdicts.outcome(0.1 * n, 0.05)
    assert r["mde"] == pytest.approx(2.80 * 0.1, rel=0.08) and r["halfwidth90"] == pytest.approx(0.1645, rel=0.08)
    # failed draws: counted; over 10% the verdict is not_resolved (fit unstable), never an interval
    d = -0.2 + 0.02 * n
    d[:150] = np.nan
    r = verdicts.outcome(d, 0.05)
    assert r["verdict"] == "better" and r["failed"] == pytest.approx(0.075)
    d[:300] = np.nan
    r = verdicts.outcome(d, 0.05)
    assert r["verdict"] == "not_resolved" and r["reason"] == "fit unstable" and r["ci_low"] is None
    from linscale_jax.study.scaling.findings import label

    assert label(r) == "not_resolved (fit unstable)"


def test_judge_resolves_planted_differences_and_states_the_finding():
    t = table({"llama": 0.0, "tnl": 0.3, "hgrn2": -0.3}, seed=1)
    r = verdicts.judge(t, n_boot=60, holdout=False, linear=LIN)
    eq = r["equal_compute"]
    assert eq["archs"]["tnl"]["verdict"] == "worse" and eq["archs"]["hgrn2"]["verdict"] == "better"
    assert eq["archs"]["tnl"]["diff"] == pytest.approx(0.3, abs=0.05)
    assert eq["archs"]["tnl"]["measured"]["diff"] == pytest.approx(0.3, abs=0.05)
    assert eq["archs"]["tnl"]["measured"]["verdict"] == "worse" and eq["archs"]["tnl"]["failed"] == 0
    assert eq["verdict"] == "not reproduced"
    assert r["seed_sd"]["llama"]["df"] == 1 and r["seed_sd_pooled"]["df"] == 3
    assert r["law_at_common_compute"]["best"] == "hgrn2" and r["law_at_common_compute"]["resolved"]
    t = table({"llama": 0.0, "tnl": 0.0, "hgrn2": -0.3}, seed=2, ckpt_sd=0.001, run_sd=0.002,
              replicates={0: 3, 1: 3, 2: 3, 3: 3})
    eq = verdicts.judge(t, n_boot=60, holdout=False, linear=LIN)["equal_compute"]
    assert eq["archs"]["tnl"]["verdict"] == "equivalent" and eq["verdict"] == "reproduced"


def test_draws_keep_every_size():
    t = table({"llama": 0.0, "tnl": 0.1}, seed=6, ckpt_sd=0.02, points=12)
    prep = verdicts.prepare(t)
    d = verdicts.draw(prep, 50, np.random.default_rng(0))
    assert [x.shape for x in d["llama"]] == [(50, 12)] * len(SIZES) and prep["pooled"].df == 2
    assert all(np.all(np.isfinite(x)) for a in d for x in d[a])


def test_the_seed_sd_uncertainty_widens_the_interval():
    from linscale_jax.fit import bootstrap as bs

    sd = bs.SeedSd(0.02, 1, "measured")
    lo, hi = sd.interval()
    assert lo == pytest.approx(0.02 * 0.446, rel=0.01) and hi == pytest.approx(0.02 * 31.9, rel=0.01)
    draws = sd.draws(np.random.default_rng(0), 20000)
    assert np.mean(draws > 0.02 * 31.9) == pytest.approx(0.025, abs=0.006)
    assert np.all(bs.SeedSd(0.02, np.inf, "assumed").draws(np.random.default_rng(0), 5) == 0.02)
    assert bs.pooled([bs.SeedSd(0.01, 1, "a"), bs.SeedSd(0.03, 3, "b"), bs.SeedSd(0, 0, "none")]).sd == \
        pytest.approx(np.sqrt((0.01**2 + 3 * 0.03**2) / 4)) and bs.pooled([bs.SeedSd(0, 0, "x")]).df == 0
    t = table({"llama": 0.0, "tnl": 0.06}, seed=8, run_sd=0.03)
    few = verdicts.judge(t, n_boot=200, holdout=False, linear=LIN)["equal_compute"]["archs"]["tnl"]
    more = table({"llama": 0.0, "tnl": 0.06}, seed=8, run_sd=0.03, replicates={0: 5, 1: 5})
    many = verdicts.judge(more, n_boot=200, holdout=False, linear=LIN)["equal_compute"]["archs"]["tnl"]
    assert many["mde"] < few["mde"]


def test_power_law_finding_uses_the_held_out_size():
    t = table({"llama": 0.0}, seed=3, ckpt_sd=0.003, run_sd=0.005)
    r = verdicts.judge(t, n_boot=40, tolerance=0.3, linear=LIN)["power_laws"]["archs"]["llama"]
    assert r["exponent"] < 0 and r["exponent_ci"][1] < 0 and len(r["holdout"]) == 1
    assert r["verdict"] == "holds" and r["lack_of_fit"]["df1"] == 2
    # the same law held to 0.001 nats: the power law through the envelope misses it, resolved
    r = verdicts.judge(t, n_boot=40, tolerance=0.001, linear=LIN)["power_laws"]["archs"]["llama"]
    assert r["verdict"] == "fails"
    five = study_table({"llama": 0.0}, points=6, replicates={0: 2}, seed=3, ckpt_sd=0.003, run_sd=0.005)
    r = verdicts.judge(five, n_boot=40, tolerance=0.3, linear=LIN)["power_laws"]["archs"]["llama"]
    assert len(r["holdout"]) == 2  # 5 sizes: the two largest held out


def test_failing_fits_give_not_resolved_fit_unstable(monkeypatch):
    from linscale_jax.fit import approach1_draws

    t = table({"llama": 0.0, "tnl": 0.3}, seed=4)
    real = approach1_draws.fit_draws

    def flaky(flops, loss, at, **kw):
        d = real(flops, loss, at, **kw)
        if len(loss[0]) > 1:  # the draws, not the point fit: a fifth of them fail
            d.law_at[::5] = np.nan
            d.failed[::5] = True
        return d

    monkeypatch.setattr(approach1_draws, "fit_draws", flaky)
    row = verdicts.judge(t, n_boot=50, holdout=False, linear=LIN)["equal_compute"]["archs"]["tnl"]
    assert row["verdict"] == "not_resolved" and row["reason"] == "fit unstable" and row["failed"] == 0.2
    assert row["ci_low"] is None and row["measured"]["verdict"] == "worse"


def test_an_arch_with_too_few_sizes_is_not_resolved_not_an_error():
    t = table({"llama": 0.0, "tnl": 0.3}, seed=9)
    two = t.take((t.arch == "llama") | (t.n_params <= SIZES[1]))  # tnl: 2 sizes, no envelope
    r = verdicts.judge(two, n_boot=20, linear=LIN)
    row = r["equal_compute"]["archs"]["tnl"]
    assert row["verdict"] == "not_resolved" and row["diff"] is None and "no law" in row["note"]
    assert r["power_laws"]["archs"]["tnl"]["verdict"] == "not_resolved"
    assert r["power_laws"]["archs"]["llama"]["exponent"] < 0


def test_estimators_that_disagree_give_depends():
    assert verdicts.combine({"val_loss": "not resolved", "cooldown": "reproduced"}) == "depends on the estimator"
    assert verdicts.combine({"tuned": "a", "paper": "b"}, "learning-rate protocol") == \
        "depends on the learning-rate protocol"


def test_command_json_from_a_table_with_a_seed_column(tmp_path):
    t = table({"llama": 0.0, "tnl": 0.3}, seed=5)
    path = tmp_path / "table.csv"
    with open(path, "w") as f:
        f.write("arch,run,step,n_params,tokens,flops,loss,seed\n")
        for i in range(len(t)):
            f.write(f"{t.arch[i]},{t.run[i]},{int(t.step[i])},{t.n_params[i]},{t.tokens[i]},{t.flops[i]},"
                    f"{t.loss[i]},{1 if 'seed1' in t.run[i] else 0}\n")
    text = verdicts.command([str(path)], bootstrap=40, as_json=True)  # python -m linscale_jax.study verdicts
    assert "NaN" not in text
    out = json.loads(text)
    assert set(out) == {"power_laws", "equal_compute", "retrieval"}
    row = out["equal_compute"]["archs"]["tnl"]
    assert row["verdict"] == "worse" and row["ci_low"] > 0 and {"diff", "ci_high", "measured", "mde"} <= set(row)
    assert out["equal_compute"]["verdict"] == "not reproduced"
    from linscale_jax.fit.table import FitError

    with pytest.raises(FitError, match="missing.csv does not exist"):
        verdicts.command([str(tmp_path / "missing.csv")])
