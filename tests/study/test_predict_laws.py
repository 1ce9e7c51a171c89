"""The predict kind's laws beyond approach 3 and where its miss lies: the law form chosen per arch by
how far it misses the ladder's sizes (study.form), and the error along each rung's tokens
(P/prediction_curves.csv and its report section), on the planted ladder of helpers.predict_ladder."""

import csv
import json
import re
from pathlib import Path

import pytest

from helpers.predict_ladder import Ctx, lad, ladder, planned, predict_study  # noqa: F401 (fixtures)
from linscale_jax.study.predict import experiment
from linscale_jax.study.predict.ladder import PredictError


@pytest.mark.parametrize("form", ["auto", "kaplan"])
def test_the_error_along_each_rungs_tokens(ladder, lad, tmp_path, form):
    """P/prediction_curves.csv holds actual − the law's point fit at every checkpoint of each rung whose
    seeds reached their last step; the report's section gives it at ¼, ½, the end and at the ladder's own
    tokens for a size the ladder trained; an estimator measured once per run has no such path."""
    from linscale_jax.fit.holdout import FORMS
    from linscale_jax.study.predict import along, report

    s = predict_study(ladder[0], form=form)
    runs = experiment.plan(s, str(tmp_path))
    fc = json.loads((tmp_path / "predictions.json").read_text())
    w = fc["archs"]["llama"]["law"]
    rungs = {g["name"]: g for g in fc["archs"]["llama"]["rungs"]}
    per_step = runs[1].tokens / runs[1].steps

    def write(run, fractions, error):
        g = rungs[run.name]
        rows = []
        for f in fractions:
            step = int(round(run.steps * f))
            d = step * per_step
            loss = FORMS[w["form"]].loss(w["E"], w["A"], w["B"], w["alpha"], w["beta"], g["n_law"], d) + error(f)
            rows.append(dict(task="val_loss", step=step, tokens=d, val_loss=loss))
        ev = Path(run.workdir) / "eval"
        ev.mkdir(parents=True, exist_ok=True)
        (ev / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    eighths = [i / 8 for i in range(1, 9)]
    write(runs[0], eighths[:-1], lambda f: 0.0)  # not at its last step yet: left out
    write(runs[1], eighths, lambda f: 0.05 * f)  # the error grows along D to +0.05 at the end
    write(runs[2], eighths, lambda f: -0.02)
    joined = experiment.join(s, runs, str(tmp_path), Ctx())
    with open(tmp_path / experiment.PREDICTION_CURVES_CSV) as f:
        got = list(csv.DictReader(f))
    assert tuple(got[0]) == along.COLUMNS
    assert [r["size"] for r in got] == [runs[1].size] * 8 + [runs[2].size] * 8
    assert [float(r["error"]) for r in got[:8]] == pytest.approx([0.05 * f for f in eighths], abs=1e-5)
    by = {r["size"]: r for r in joined["along"]}
    opt = by[runs[1].size]
    assert (opt["quarter"], opt["half"], opt["end"]) == pytest.approx((0.0125, 0.025, 0.05), abs=1e-5)
    assert by[runs[2].size]["end"] == pytest.approx(-0.02, abs=1e-5)
    seen = along.seen_of(lad, fc)
    trained = {round(float(c.n_params)): float(c.tokens[-1]) for c in lad.curves("llama")}
    assert seen == {("llama", g["size"]): trained[round(g["n_law"])] for g in rungs.values()
                    if round(g["n_law"]) in trained}
    for size, r in by.items():
        assert (r["seen"] is None) == (("llama", size) not in seen)
    text = "\n".join(report.lines(joined))
    assert "## The error along each rung's tokens" in text
    assert re.search(rf"\| llama \| {runs[1].size} \| .* \| \+0\.01[23] \| \+0\.025 \| \+0\.050 \|$", text, re.M)
    assert along.rows_of(fc, runs, "cooldown") == []


def test_the_law_form_is_the_one_that_misses_the_ladder_least(ladder, planned, tmp_path):
    """study.form=auto (the default): each arch's law is approach 3's or Kaplan's, whichever misses the
    ladder's sizes least, both misses recorded; a named form is used as given and is part of the
    settings (another form is another prediction); an unknown form is one line."""
    from linscale_jax.study.predict import report

    study, P, runs = planned
    fc = json.loads((Path(P) / "predictions.json").read_text())
    p = fc["archs"]["llama"]
    assert fc["settings"]["form"] == "auto" and set(p["form_rms"]) == {"additive", "kaplan"}
    assert p["law"]["form"] == min(p["form_rms"], key=p["form_rms"].get)
    s = predict_study(ladder[0], form="kaplan")
    experiment.plan(s, str(tmp_path))
    got = json.loads((tmp_path / "predictions.json").read_text())
    assert got["settings"]["form"] == "kaplan" and got["archs"]["llama"]["law"]["form"] == "kaplan"
    assert got["archs"]["llama"]["form_rms"] == {}
    joined = experiment.join(s, experiment.plan(s, str(tmp_path)), str(tmp_path), Ctx())
    text = "\n".join(report.lines(joined))
    assert "Kaplan's E + ((A/N)^(α/β) + B/D)^β" in text and re.search(r"^\| llama \| kaplan \| — \| 5 \|", text, re.M)
    with pytest.raises(PredictError, match=r"study.form: law form 'joint': pass auto or one of additive, kaplan"):
        experiment.plan(predict_study(ladder[0], form="joint"), str(tmp_path / "bad"))
