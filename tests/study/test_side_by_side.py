"""study.side_by_side: replicate studies compared, and whether their verdicts agree."""

import json
import os

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
