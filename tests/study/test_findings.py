"""study.findings: the paper's three findings judged from a study's numbers, each verdict following
its intervals (synthetic inputs with known answers)."""

from linscale_jax.study.scaling import findings


def _result(eq_archs: dict):
    """A study.verdicts.judge_all result for one estimator with finding 2's per-arch rows."""
    from linscale_jax.study.scaling import verdicts

    pl = {"verdict": "not resolved", "archs": {"llama": {"verdict": "not_resolved", "exponent": -0.1}}}
    vs = [r["verdict"] for r in eq_archs.values()]
    eq = {"verdict": "reproduced" if all(v in ("better", "equivalent") for v in vs) else
          "not reproduced" if "worse" in vs else "not resolved", "archs": eq_archs, "compute": 1e-8}
    one = {"power_laws": pl, "equal_compute": eq, "margin": 0.05, "tolerance": 0.1, "seed_sd": {}}
    out = {"estimators": ["val_loss"], "margin": 0.05, "tolerance": 0.1, "by_estimator": {"val_loss": one},
           "findings": {k: dict(one[k], by_estimator={"val_loss": one[k]["verdict"]},
                                archs={a: dict(r, by_estimator={"val_loss": r}) for a, r in one[k]["archs"].items()})
                        for k in ("power_laws", "equal_compute")}}
    out["findings"]["retrieval"] = {"verdict": "not measured here", "archs": {}}
    assert verdicts.combine({"a": "x", "b": "x"}) == "x"
    return out


def _row(d, lo, hi, v, **kw):
    return dict(diff=d, ci_low=lo, ci_high=hi, verdict=v, failed=0.0, mde=0.12, halfwidth90=0.04,
                measured=dict(diff=d, ci_low=lo and lo - 0.1, ci_high=hi and hi + 0.1, verdict="not_resolved"), **kw)


def test_section_states_each_finding_from_the_verdicts():
    res = _result({"tnl": _row(0.2, 0.05, 0.35, "worse"), "hgrn2": _row(-0.01, -0.04, 0.03, "equivalent")})
    lines, verdicts = findings.section(res)
    assert verdicts["equal_compute"] == "not reproduced"
    text = "\n".join(lines)
    assert ("| tnl | val_loss | +0.200 [+0.050, +0.350] | +0.200 [-0.050, +0.450] not_resolved | 0.120 | 0.040 "
            "| 0% | worse |") in text
    assert "tnl **worse**" in text and "hgrn2 **equivalent**" in text and "**not resolved**" in text
    res = _result({"tnl": _row(-0.2, -0.3, -0.1, "better"), "hgrn2": _row(0.0, -0.2, 0.2, "not_resolved")})
    assert findings.section(res)[1]["equal_compute"] == "not resolved"  # never "reproduced"
    res = _result({"tnl": _row(None, None, None, "not_resolved", reason="fit unstable", note="rests on the fit")})
    text = "\n".join(findings.section(res)[0])
    assert "not_resolved (fit unstable)" in text and "rests on the fit" in text


def test_retrieval_from_recall_cells():
    def row(arch, acc, half):
        return dict(arch=arch, d_model=32, n_pairs=4, accuracy=acc, ci_low=acc - half, ci_high=acc + half)

    rec = dict(rows=[row("llama", 0.95, 0.03), row("tnl", 0.02, 0.01), row("hgrn2", 0.93, 0.03)],
               control=dict(met=True, best=0.95, cell=(32, 8, 4)), did_not_train=[])
    diffs = findings.recall_differences(rec["rows"])
    assert [(a, round(v[0], 2)) for *_, a, v in diffs] == [("tnl", 0.93), ("hgrn2", 0.02)]
    assert diffs[0][3][1] > 0 and diffs[1][3][1] < 0 < diffs[1][3][2]
    verdict, _ = findings.retrieval(rec, "recall.csv")
    assert "partly reproduced" in verdict and "1 of 2" in verdict
    assert "not measured" in findings.retrieval(None, "")[0]
    rec["control"] = dict(met=False, best=0.5, cell=(32, 8, 4))  # positive control not met
    assert findings.retrieval(rec, "recall.csv")[0].startswith("**not measured**")


def test_recall_from_names_a_missing_file(tmp_path):
    import pytest
    from ml_collections import ConfigDict

    assert findings.recall_rows_from(ConfigDict(dict(recall_from=""))) == (None, "")
    with pytest.raises(FileNotFoundError, match="configs/study/recall.py"):
        findings.recall_rows_from(ConfigDict(dict(recall_from=str(tmp_path))))
