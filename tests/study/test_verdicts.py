"""study.verdicts: four outcomes that can fail, from any checkpoint table (synthetic tables with a
known answer), the command line, and the calibration (slow)."""

import json

import numpy as np
import pytest

from fit.synthetic_study import study_table
from fit.table import FitError
from study import verdicts

LIN = ("tnl", "hgrn2")


def test_outcome_four_ways():
    rng = np.random.default_rng(0)
    n = rng.standard_normal(2000)
    assert verdicts.outcome(0.01 * n, 0.05)["verdict"] == "equivalent"
    assert verdicts.outcome(-0.2 + 0.02 * n, 0.05)["verdict"] == "better"
    assert verdicts.outcome(0.2 + 0.02 * n, 0.05)["verdict"] == "worse"
    assert verdicts.outcome(0.1 * n, 0.05)["verdict"] == "not_resolved"
    # a small resolved difference inside the margin is equivalent (TOST), not better
    assert verdicts.outcome(-0.02 + 0.005 * n, 0.05)["verdict"] == "equivalent"
    assert verdicts.outcome(-0.02 + 0.005 * n, 0.01)["verdict"] == "better"


def test_judge_resolves_planted_differences_and_states_the_finding():
    t = study_table({"llama": 0.0, "tnl": 0.3, "hgrn2": -0.3}, ckpt_sd=0.005, run_sd=0.01, points=4,
                    replicates={0: 2}, seed=1)
    r = verdicts.judge(t, n_boot=60, holdout=False, linear=LIN)
    eq = r["equal_compute"]
    assert eq["archs"]["tnl"]["verdict"] == "worse" and eq["archs"]["hgrn2"]["verdict"] == "better"
    assert eq["archs"]["tnl"]["diff"] == pytest.approx(0.3, abs=0.05)
    assert eq["verdict"] == "not reproduced"
    assert r["seed_sd"]["llama"]["source"].startswith("measured")
    t = study_table({"llama": 0.0, "tnl": 0.0, "hgrn2": -0.3}, ckpt_sd=0.002, run_sd=0.003, points=4,
                    replicates={0: 2}, seed=2)
    eq = verdicts.judge(t, n_boot=60, holdout=False, linear=LIN)["equal_compute"]
    assert eq["archs"]["tnl"]["verdict"] == "equivalent" and eq["verdict"] == "reproduced"


def test_power_law_finding_uses_the_held_out_size():
    t = study_table({"llama": 0.0}, ckpt_sd=0.003, run_sd=0.005, points=4, seed=3)
    r = verdicts.judge(t, n_boot=40, tolerance=0.3, linear=LIN)["power_laws"]["archs"]["llama"]
    assert r["exponent"] < 0 and r["exponent_ci"][1] < 0 and "holdout" in r
    assert r["verdict"] == "holds"
    # the same law held to 0.001 nats: the power law through the envelope misses it, resolved
    r = verdicts.judge(t, n_boot=40, tolerance=0.001, linear=LIN)["power_laws"]["archs"]["llama"]
    assert r["verdict"] == "fails"


def test_more_than_half_failed_resamples_give_no_interval(monkeypatch):
    t = study_table({"llama": 0.0, "tnl": 0.2}, ckpt_sd=0.005, run_sd=0.01, points=4, seed=4)
    real, calls = verdicts.law_of, {"n": 0}

    def flaky(arch, curves):
        calls["n"] += 1
        if arch == "tnl" and calls["n"] % 3:  # two of three tnl refits fail
            raise FitError("planted failure")
        return real(arch, curves)

    monkeypatch.setattr(verdicts, "law_of", flaky)
    row = verdicts.judge(t, n_boot=30, holdout=False, linear=LIN)["equal_compute"]["archs"]["tnl"]
    assert row["verdict"] == "not_resolved" and row["ci_low"] is None and "no interval" in row["note"]


def test_estimators_that_disagree_give_depends():
    assert verdicts.combine({"val_loss": "not resolved", "cooldown": "reproduced"}) == "depends on the estimator"


def test_cli_json_from_a_table_with_a_seed_column(tmp_path, capsys):
    t = study_table({"llama": 0.0, "tnl": 0.3}, ckpt_sd=0.005, run_sd=0.01, points=4, replicates={0: 2},
                    seed=5)
    path = tmp_path / "table.csv"
    with open(path, "w") as f:
        f.write("arch,run,step,n_params,tokens,flops,loss,seed\n")
        for i in range(len(t)):
            f.write(f"{t.arch[i]},{t.run[i]},{int(t.step[i])},{t.n_params[i]},{t.tokens[i]},{t.flops[i]},"
                    f"{t.loss[i]},{1 if 'seed1' in t.run[i] else 0}\n")
    assert verdicts.main([f"--table={path}", "--bootstrap=40", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"power_laws", "equal_compute", "retrieval"}
    row = out["equal_compute"]["archs"]["tnl"]
    assert row["verdict"] == "worse" and row["ci_low"] > 0 and {"diff", "ci_high"} <= set(row)
    assert out["equal_compute"]["verdict"] == "not reproduced"
    assert verdicts.main([f"--table={tmp_path / 'missing.csv'}"]) == 1


@pytest.mark.slow
def test_calibration_smaller_version():
    """bench/verdict_calibration.py in small: 30 seeds per case on the cooldown estimator's noise."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "cal", Path(__file__).resolve().parents[2] / "bench" / "verdict_calibration.py")
    cal = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cal)
    null = cal.rates(3, 0.014, 0.025, 0.0, seeds=30, n_boot=40, margin=0.05, replicates={0: 2, 4: 2})
    assert null["better"] + null["worse"] <= 0.10
    hit = cal.rates(3, 0.014, 0.025, -0.1, seeds=30, n_boot=40, margin=0.05, replicates={0: 2, 4: 2})
    assert hit["better"] >= 0.6
