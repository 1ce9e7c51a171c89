"""study.inputs: files read from another study (recall.csv, findings.json, calibration.json, the
protocol_from study) are checked before use: each bad value is one line naming the file, the row or
entry and the fix (the study command's own refusal at its start: tests/study/test_study_faults.py)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from helpers.study import ROOT, recall_csv
from linscale_jax.study import inputs
from linscale_jax.study.recall.table import read_csv


@pytest.mark.parametrize("change, named", [
    (dict(tnl="nan"), "row 4: accuracy is 'nan', not a finite number"),
    (dict(tnl="high"), "row 4: accuracy is 'high', not a finite number"),
    (dict(tnl="1.5"), "row 4: accuracy is '1.5', not a share in [0, 1]"),
    (dict(d_model="32.5"), "row 4: d_model is '32.5', not an integer"),
    (dict(lr="-0.001"), "row 4: lr is '-0.001', not a finite rate > 0"),
    (dict(test_loss="nan"), "row 4: test_loss is 'nan' in a cell with status 'recall'"),
    (dict(status="great"), "row 4: status is 'great', not one of"),
    (dict(truncate=True), "row 7 has 10 of 20 fields (truncated or edited?)"),
])
def test_a_bad_recall_csv_names_the_file_and_row(tmp_path, change, named):
    path = recall_csv(tmp_path, **change)
    with pytest.raises(inputs.InputError) as e:
        read_csv(str(path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path} ") and named in msg, msg
    assert "recall study's command" in msg


def test_a_good_recall_csv_reads_and_a_cell_that_did_not_train_may_have_no_loss(tmp_path):
    rows = read_csv(str(recall_csv(tmp_path, test_loss="nan", status="did_not_train")))
    assert [r["arch"] for r in rows] == ["llama"] * 2 + ["tnl"] * 2 + ["hgrn2"] * 2
    assert rows[0]["d_model"] == 32 and rows[0]["accuracy"] == 0.97 and math.isnan(rows[2]["test_loss"])
    assert [r["seed"] for r in rows[:2]] == ["0", "all"]


def _findings(path, **change) -> dict:
    doc = {"estimators": ["val_loss"], "findings": {"power_laws": {"verdict": "reproduced"}},
           "design": {"archs": ["llama", "tnl"], "sizes": ["d32", "d48", "d64"], "tokens": 24576.0,
                      "seq_len": 128, "data_task": "stdlib", "vocab": "byte", "protocol": "tuned"}}
    doc["design"].update(change)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return doc


def test_a_damaged_findings_json_names_the_file_and_entry(tmp_path):
    path = tmp_path / "findings.json"
    text = json.dumps(_findings(path))
    for bad, named in ((text[: len(text) // 2], "is not valid JSON ("),
                       (text.replace('"reproduced"', "NaN"), "findings.power_laws.verdict is nan"),
                       ("[]", "holds a JSON list, not an object"),
                       (text.replace("\"findings\"", "\"finding\""), "entry findings is missing")):
        path.write_text(bad)
        with pytest.raises(inputs.InputError) as e:
            inputs.findings(str(path))
        assert "\n" not in str(e.value) and str(e.value).startswith(f"{path}") and named in str(e.value), e.value
        assert f"--workdir={tmp_path} --join_only" in str(e.value)


def test_a_damaged_calibration_json_names_the_design_and_case(tmp_path):
    path = tmp_path / "calibration.json"
    assert inputs.calibration(str(path)) is None
    case = dict(case="null", better=0.02, worse=0.03, equivalent=0.5, not_resolved=0.45)
    design = dict(design="own", cases=[case], scenarios=["1x"], summary="s", command="c", cost={"text": "t"})
    path.write_text(json.dumps(dict(designs=[design])))
    assert inputs.calibration(str(path))["designs"][0]["cases"][0]["worse"] == 0.03
    for bad, named in ((dict(designs=[dict(design, cases=[dict(case, worse=1.7)])]), "designs[0].cases[0].worse is 1.7"),
                       (dict(designs=[dict(design, summary=None)]), "entry designs[0].summary is a NoneType")):
        path.write_text(json.dumps(bad))
        with pytest.raises(inputs.InputError, match=r"delete it and re-run `python -m linscale_jax.study --config=calibrate") as e:
            inputs.calibration(str(path))
        assert named in str(e.value), e.value
    path.write_text('{"designs": [{"design": "own", "cases": [{"bet')
    with pytest.raises(inputs.InputError, match="is not valid JSON"):
        inputs.calibration(str(path))


def test_protocol_from_must_be_the_other_rule_on_the_same_runs(tmp_path):
    """The other protocol's study: the same archs, sizes, tokens and data under another optim.rule;
    the same rule, or other sizes, is refused in one line naming what differs."""
    from linscale_jax.study.scaling import plan, results

    spec = importlib.util.spec_from_file_location("_cpu", ROOT / "configs" / "study" / "cpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    study = mod.get_config()
    study.archs = "llama,tnl"
    runs = plan.build_plan(study, str(tmp_path / "here"))
    mine = results.design(study, runs)
    src = tmp_path / "other"
    study.protocol_from = str(src)
    _findings(src / "findings.json", **{**{k: mine[k] for k in inputs.SAME_RUNS}, "protocol": "paper"})
    assert mine["protocol"] == "tuned" and inputs.other_protocol(str(src), mine)["design"]["protocol"] == "paper"
    for change, named in ((dict(protocol="tuned"), "ran under optim.rule='tuned', and so does this study"),
                          (dict(sizes=mine["sizes"][:-1]), f"sizes {mine['sizes'][:-1]!r} there, {mine['sizes']!r} here"),
                          (dict(tokens=mine["tokens"] * 2), "tokens")):
        _findings(src / "findings.json", **{**{k: mine[k] for k in inputs.SAME_RUNS}, "protocol": "paper", **change})
        with pytest.raises(inputs.InputError) as e:
            results.protocol_sources(study, runs)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"study.protocol_from={str(src)!r}") and named in msg, msg
        assert "under the other learning-rate rule" in msg
