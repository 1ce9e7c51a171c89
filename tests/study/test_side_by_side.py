"""study.side_by_side: replicate studies compared, and whether their verdicts agree."""

import json
import os

import numpy as np

import pytest

from linscale_jax.study.scaling import side_by_side


def _study(d, best="llama", resolved=False, power="reproduced"):
    os.makedirs(d / "fit")
    common = dict(compute=1e-8, best=best, runner_up="tnl", diff=[0.02, -0.01, 0.05], resolved=resolved,
                  vs_llama={"tnl": [0.02, -0.01, 0.05]})
    (d / "findings.json").write_text(json.dumps(dict(
        findings=dict(power_laws=power, equal_compute="reproduced", retrieval="reproduced"),
        common_compute=common, law_at_common_compute=common,
        checkpoint_sd={"llama": {"sd": 0.01, "rise": 0.1}, "tnl": {"sd": None, "rise": None}},
        checkpoint_sd_raw={"llama": {"sd": 0.05, "rise": 0.3}}, seed_sd=0.05)))
    law = {"L_C": {"exponent": -0.08, "ci95": {"exponent": [-0.1, -0.06]}}}
    (d / "fit" / "fits.json").write_text(json.dumps({"llama": law, "tnl": law}))
    (d / "fit" / "table.csv").write_text("arch,run,step,n_params,tokens,flops,loss\n"
                                         "llama,llama-d32,100,10,1,1,2.5\nllama,llama-d64,100,20,1,1,2.3\n"
                                         "llama,llama-d64,200,20,1,1,2.2\ntnl,tnl-d64,200,20,1,1,2.4\n")
    (d / "holdout.csv").write_text("arch,n_params,tokens,predicted,ci_low,ci_high,actual\n"
                                   "llama,20,1,2.25,2.1,2.4,2.2\n")
    return str(d)


def test_agreeing_replicates(tmp_path):
    text = side_by_side.render([_study(tmp_path / "a"), _study(tmp_path / "b", best="tnl")])
    assert "**Verdicts agree: yes**" in text and "neither is resolved" in text
    assert "| llama | 2.2000; predicted 2.2500 [2.1000, 2.4000] inside |" in text
    assert "0.0100 (10%) | 0.0500 (30%)" in text and "| tnl | — | — |" in text


def test_disagreeing_replicates(tmp_path):
    a, b = _study(tmp_path / "a", resolved=True), _study(tmp_path / "b", best="tnl", power="not reproduced")
    text = side_by_side.render([a, b])
    assert "**Verdicts agree: no**" in text and "findings differ" in text


def test_unfinished_study_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a finished study"):
        side_by_side.render([_study(tmp_path / "a"), str(tmp_path / "empty")])


def _found(rows: dict, sd: float, df: int) -> dict:
    """findings.json entries reproduce reads: finding 2's rows {arch: {estimator: (diff, lo, hi, verdict)}}."""
    from linscale_jax.fit import power

    model = power.Model(v0=1e-4, c=1.0, sd=sd, df=df, margin=0.05).json()
    archs = {a: {"by_estimator": {e: dict(diff=d, ci_low=lo, ci_high=hi, verdict=v, mde=0.05, power_model=model)
                                  for e, (d, lo, hi, v) in by.items()}} for a, by in rows.items()}
    return dict(findings=dict(equal_compute=dict(verdict="reproduced", archs=archs)),
                by_estimator={"val_loss": {"seed_sd_pooled": {"sd": sd, "df": df}}})


def test_finding_two_of_a_second_seed_against_the_first(tmp_path):
    from linscale_jax.study.scaling import reproduce

    first = _found({"tnl": {"val_loss": (-0.02, -0.05, 0.01, "equivalent"), "cooldown": (0.1, 0.06, 0.14, "worse")},
                    "hgrn2": {"val_loss": (0.0, -0.03, 0.03, "equivalent"), "cooldown": (0.0, -0.02, 0.02, "equivalent")}},
                   0.016, 8)
    second = _found({"tnl": {"val_loss": (0.02, -0.02, 0.06, "not_resolved"), "cooldown": (0.09, 0.05, 0.13, "worse")},
                     "hgrn2": {"val_loss": (-0.01, -0.05, 0.03, "equivalent"), "cooldown": (0.08, 0.06, 0.10, "worse")}},
                    0.03, 8)
    rows = {(r["arch"], r["estimator"]): r for r in reproduce.finding2(first, second)}
    assert set(rows) == {("tnl", "val_loss"), ("tnl", "cooldown"), ("hgrn2", "val_loss"), ("hgrn2", "cooldown")}
    order = sorted(rows)  # hgrn2 cooldown, hgrn2 val_loss, tnl cooldown, tnl val_loss
    assert [rows[k]["inside"] for k in order] == [False, True, True, False]
    # outside the first's interval but within the two intervals' joint noise: z = 0.04 / (0.05 / 1.96)
    assert rows["tnl", "val_loss"]["z"] == pytest.approx(0.04 / (np.hypot(0.03, 0.04) / 1.959964))
    assert [rows[k]["consistent"] for k in order] == [False, True, True, True]
    assert rows["hgrn2", "cooldown"]["z"] == pytest.approx(0.08 / (np.hypot(0.02, 0.02) / 1.959964))
    point = dict(diff=0.1, ci_low=0.1, ci_high=0.1)  # zero-width intervals: equal is consistent, apart is not
    assert reproduce.z_of(point, point) == 0.0 and reproduce.z_of(point, dict(diff=0.2, ci_low=0.2, ci_high=0.2)) == np.inf
    assert rows["tnl", "val_loss"]["width_ratio"] == pytest.approx(0.08 / 0.06)
    assert not rows["tnl", "val_loss"]["same_verdict"] and rows["tnl", "cooldown"]["same_verdict"]
    assert rows["hgrn2", "val_loss"]["power_1"] > rows["hgrn2", "val_loss"]["power_2"]  # the larger sd: less power
    s = reproduce.summary(list(rows.values()))
    assert (s["inside"], s["consistent"], s["same_verdict"], s["widths_within"]) == (2, 3, 2, 4)
    text = "\n".join(reproduce.section(first, second, ("seed 0", "seed 7")))
    assert "val_loss: seed 0 0.0160 (8 df), seed 7 0.0300 (8 df)" in text
    assert "| seed 7 inside seed 0's interval | z, consistent | width ratio (seed 7 / seed 0) |" in text
    assert "| val_loss | tnl | -0.020 [-0.050, +0.010] | equivalent | +0.020 [-0.020, +0.060] | not_resolved | **no** | +1.6, yes |" in text
    assert "**2 of 4** of seed 7's differences lie inside seed 0's 95 % intervals; **3 of 4** consistent" in text
    assert reproduce.section(first, _found({}, 0.03, 8), ("a", "b")) == []  # nothing judged in both
