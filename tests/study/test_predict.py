"""The predict kind on a finished ladder with planted losses (the main job's protocol on a mixed
ladder, no training): the rungs and their budgets at 4x the ladder's largest compute, the
learning-rate rule extrapolated or refused, prediction.csv with its flags, the verdicts and the
report's lines, and the refusals."""

import csv
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from linscale_jax.study import files
from linscale_jax.study.predict import experiment, outcome
from helpers.predict_ladder import (SHORT, Ctx, fake_results, lad, ladder, law, planned,  # noqa: F401 (fixtures)
                                    predict_study)
from linscale_jax.study.predict.ladder import PredictError, open_ladder


def test_the_rungs_bracket_the_optimum_at_4x_the_ladder(ladder, lad, planned):
    from linscale_jax.train import rule

    study, P, runs = planned
    c = 4 * max(r.flops for r in ladder[1])
    fam = lad.family("llama")
    assert [f["size"] for f in fam] == ["d16", "d32", "d48", "d64", "d80", "d96", "d128", "d192"]  # depth 4, as d48
    true = int(np.argmin([law(f["n_law"], c / f["flops_per_token"]) for f in fam]))
    sizes = [f["size"] for f in fam]
    assert [r.size for r in runs] == sizes[sizes.index(runs[1].size) - 1:sizes.index(runs[1].size) + 2]
    assert abs(sizes.index(runs[1].size) - true) <= 1  # the planted optimum is among the rungs
    fc = json.loads((Path(P) / "predictions.json").read_text())
    assert fc["compute"] == pytest.approx(c)
    rungs = fc["archs"]["llama"]["rungs"]
    assert [g["predicted_optimum"] for g in rungs] == [False, True, False]
    for r, f in zip(runs, (next(x for x in fam if x["size"] == r.size) for r in runs)):
        step = r.config.train.batch_size * r.config.train.seq_len
        assert c / f["flops_per_token"] <= r.tokens < c / f["flops_per_token"] + step  # D = C / FLOPs per token
        assert r.flops == pytest.approx(c, rel=step * f["flops_per_token"] / c + 1e-9)
        tuned = rule.load(rule.rule_path("grid"))  # the ladder's rule
        n_max = tuned["archs"]["llama"].get("range", tuned["range"])["n_max"]
        assert r.n_params > n_max and r.config.optim.rule == "paper"  # beyond the rule's sizes: extrapolated, pinned
        lr = rule.power(rule.arch_rule(tuned, "llama")["lr"], r.n_params)
        assert r.config.optim.lr == pytest.approx(lr, rel=1e-3) and r.steps == r.config.train.steps
    for g in rungs:
        assert g["ci_low"] < law(g["n_law"], g["tokens"]) < g["ci_high"]
    assert experiment.plan(study, P)[1].name == runs[1].name  # made once: the stored prediction is reused


def test_the_dry_run_lists_the_rungs_and_the_prediction(planned):
    study, P, runs = planned
    text = experiment.dry_run(study, runs)
    fc = json.loads((Path(P) / "predictions.json").read_text())
    g = next(x for x in fc["archs"]["llama"]["rungs"] if x["predicted_optimum"])
    assert text.startswith("3 run(s):") and runs[1].name in text
    assert f"llama: N_opt {g['size']} (N = {g['n_params']:.3g}), predicted {g['predicted']:.4f}" in text
    assert f"chance of the check {g['p_met']:.2f}" in text
    assert f"the target (1 or more of 1 archs): chance {g['p_met']:.2f} if the intervals hold" in text


def test_a_stored_prediction_whose_rates_changed_is_made_again(planned, tmp_path):
    """The record written before the rungs trained is reused while its settings hold and every rung
    would still train at the rates it names; a rate that differs (a rule file or its continuation
    changed since) makes it again."""
    import shutil

    from linscale_jax.study.predict import forecast as fc_lib

    study, P, _ = planned
    Q = str(tmp_path / "P")
    shutil.copytree(P, Q)
    path = Path(Q) / "predictions.json"
    stored = json.loads(path.read_text())
    rung = json.loads(json.dumps(stored["archs"]["llama"]["rungs"][1]))
    assert rung["rule"] is not None  # N_opt lies beyond the rule's sizes: its rates are recorded
    stored["archs"]["llama"]["rungs"][1]["predicted"] = 99.0  # marks the stored record
    path.write_text(json.dumps(stored))
    lad = open_ladder(study)
    assert fc_lib.forecast(study, lad, Q)["archs"]["llama"]["rungs"][1]["predicted"] == 99.0  # reused
    stored["archs"]["llama"]["rungs"][1]["rule"]["lr"] *= 1.5
    path.write_text(json.dumps(stored))
    again = fc_lib.forecast(study, lad, Q)["archs"]["llama"]["rungs"][1]
    assert again["predicted"] == pytest.approx(rung["predicted"]) and again["rule"] == rung["rule"]
    assert json.loads(path.read_text())["archs"]["llama"]["rungs"][1]["rule"] == rung["rule"]
    del stored["archs"]["llama"]["rungs"][1]["budget_tokens"]  # a record of another shape: made again, no traceback
    path.write_text(json.dumps(stored))
    assert fc_lib.forecast(study, lad, Q)["archs"]["llama"]["rungs"][1]["rule"] == rung["rule"]



def test_a_rung_trains_the_predictions_budget_not_the_ladders_budget_of_its_size(lad):
    """A ladder with a budget per size (study.tokens_by_size, as the main job's) predicts at one
    compute: a rung of a size the ladder budgeted trains the prediction's tokens all the same."""
    import dataclasses

    from linscale_jax.study.predict import protocol

    study = lad.study.copy_and_resolve_references()
    study.tokens_by_size = "d32=123456"
    cfg, _ = protocol.rung_config(dataclasses.replace(lad, study=study), "llama", "d32", 2.0e6, "extrapolate")
    step = cfg.train.batch_size * cfg.train.seq_len
    assert 2.0e6 <= cfg.train.steps * step < 2.0e6 + step


def test_an_own_lr_law_continues_past_its_sizes_along_the_default_exponent(lad):
    """tnl's own lr law (the shipped rule's, fitted on three sizes) beyond its range: continuous at the
    nearer edge, then along the default law's exponent; inside the range, or for an arch on the
    default law, the rule is left alone; the rung's note and the report say so."""
    import copy
    import dataclasses

    from linscale_jax.study.predict import protocol
    from linscale_jax.study.predict import report as report_lib
    from linscale_jax.train import rule

    tuned = rule.load(rule.rule_path("tuned"))
    own, base = rule.arch_rule(tuned, "tnl"), rule.arch_rule(tuned, "llama")
    assert own is not base and own["lr"]["exponent"] != pytest.approx(base["lr"]["exponent"], abs=0.05)
    lo, hi = (float(own["range"][k]) for k in ("n_min", "n_max"))
    for arch, n in (("tnl", (lo * hi) ** 0.5), ("llama", 4 * hi)):
        w = copy.deepcopy(tuned)
        assert protocol.continue_lr(w, arch, n, lo, hi) is None and w == tuned
    for n, edge in ((4 * hi, hi), (lo / 4, lo)):
        w = copy.deepcopy(tuned)
        assert protocol.continue_lr(w, "tnl", n, lo, hi) == dict(n_edge=edge, exponent=base["lr"]["exponent"])
        at_edge = rule.power(own["lr"], edge)
        assert rule.power(rule.arch_rule(w, "tnl")["lr"], edge) == pytest.approx(at_edge)
        assert rule.power(rule.arch_rule(w, "tnl")["lr"], n) == pytest.approx(
            at_edge * (n / edge) ** base["lr"]["exponent"])
        assert rule.arch_rule(w, "llama") == base and tuned["archs"]["tnl"]["lr"] == own["lr"]  # a copy changed

    study = lad.study.copy_and_resolve_references()
    study.overrides.optim.rule = "tuned"
    tl = dataclasses.replace(lad, study=study)
    cfgs = {size: protocol.rung_config(tl, "tnl", size, 2.0e6, "extrapolate") for size in ("d128", "d192")}
    notes = [note for _, note in cfgs.values()]
    assert all(nt["lr_continued"] == dict(n_edge=hi, exponent=base["lr"]["exponent"]) for nt in notes)
    assert all(nt["n_params"] > hi for nt in notes)
    (c1, _), (c2, _) = cfgs.values()  # the same tokens (to a step): the horizon factor cancels
    assert c2.optim.lr / c1.optim.lr == pytest.approx(
        (notes[1]["n_params"] / notes[0]["n_params"]) ** base["lr"]["exponent"], rel=2e-3)
    text = report_lib.rule_lines(dict(archs=dict(tnl=dict(rungs=[dict(size="d128", rule=notes[0])]))))
    assert "own lr law continued from its rate at N = " in "\n".join(text)


def test_join_writes_the_table_and_the_report(planned):
    study, P, runs = planned
    fc = json.loads((Path(P) / "predictions.json").read_text())
    pred = {g["name"]: g["predicted"] for g in fc["archs"]["llama"]["rungs"]}
    for i, r in enumerate(runs):
        fake_results(r, pred[r.name] + (0.01 if i == 1 else 0.2))
    branch = Path(runs[1].workdir) / files.COOLDOWNS / str(runs[1].steps) / "eval"  # its cooldown branch, beside
    branch.mkdir(parents=True)
    (branch / "results.jsonl").write_text(json.dumps(dict(task="val_loss", step=runs[1].steps + 9, val_loss=1.2345)))
    ctx = Ctx()
    joined = experiment.join(study, runs, P, ctx)
    assert [r["cooldown"] for r in joined["rows"]] == [None, 1.2345, None]
    path = experiment.report(study, P, joined, ctx)
    with open(Path(P) / "prediction.csv") as f:
        got = list(csv.reader(f))
    assert tuple(got[0]) == outcome.COLUMNS and len(got) == 4
    assert [r[-1] for r in got[1:]] == ["false", "true", "false"]
    assert float(got[2][7]) == pytest.approx(pred[runs[1].name] + 0.01, abs=1e-5)
    v = joined["verdicts"]["archs"]["llama"]
    assert v["within"] and v["inside"] and v["met"] and v["wins"]["verdict"] == "wins"
    text = Path(path).read_text()
    assert "not judged: 1 arch(s) measured, the target counts 3 of 4 (1 of 1 met so far)" in text
    assert "The learning-rate rule is extrapolated" in text and "**wins**" in text and "## Cost" in text
    p = next(g["p_met"] for g in fc["archs"]["llama"]["rungs"] if g["predicted_optimum"])
    assert 0 < p < 1 and f"**The target's chance before training**" in text and f"llama {p:.2f}; 1 or more" in text
    assert joined["verdicts"]["summary"]["chance"]["overall"] == pytest.approx(p)  # one arch: its own chance
    assert re.search(r"\| llama \| \w+ \(N_opt\) \|.* \| 1\.2345 \|$", text, re.M)
    assert (Path(P) / "prediction.png").stat().st_size > 0
    assert any("[predict] llama: N_opt" in x for x in ctx.lines)


@pytest.mark.parametrize("change, message", [
    (dict(ladder_from="missing"), "does not exist; pass a finished scaling study"),
    (dict(ladder_from="unfinished"), "is not a finished scaling study (no findings.json)"),
    (dict(ladder_preset="quick"), "was not run by the preset 'quick'"),
])
def test_a_ladder_that_cannot_predict_is_one_line(ladder, tmp_path, change, message):
    if change.get("ladder_from") == "missing":
        change = dict(ladder_from=str(tmp_path / "missing"))
    elif change.get("ladder_from") == "unfinished":
        (tmp_path / "u").mkdir()
        change = dict(ladder_from=str(tmp_path / "u"))
    with pytest.raises(PredictError, match=re.escape(message)) as e:
        experiment.plan(predict_study(ladder[0], **change), str(tmp_path / "P"))
    assert "\n" not in str(e.value)


def test_a_ladder_run_with_other_state_steps_is_the_same_runs(ladder, tmp_path):
    """A ladder whose runs kept the optimizer state at other checkpoints
    (--config.overrides.checkpoint.state_steps) trained the same runs; a changed rate did not."""
    import shutil

    other = tmp_path / "other"
    shutil.copytree(ladder[0], other)
    plan = (other / files.STUDY_PLAN).read_text()
    assert "--config.checkpoint.state_steps=" not in plan
    (other / files.STUDY_PLAN).write_text(
        plan.replace(" --config.optim.lr=", " --config.checkpoint.state_steps=512 --config.optim.lr="))
    assert open_ladder(predict_study(str(other))).workdir == str(other)
    (other / files.STUDY_PLAN).write_text(plan.replace("--config.optim.lr=", "--config.optim.lr=1", 1))
    with pytest.raises(PredictError, match="its plan.txt differs at"):
        open_ladder(predict_study(str(other)))


@pytest.mark.parametrize("what, message", [
    ("arch", "gdn is not an arch of the ladder"),
    ("sizes", f"{SHORT} has 2 size(s)"),
    ("factor", "pass a factor > 1"),
    ("edge", "the largest size of the ladder's shape"),
    ("rule", "pass --config.rule=extrapolate"),
])
def test_a_prediction_that_cannot_be_made_is_one_line(ladder, lad, what, message):
    from linscale_jax.study.predict import forecast, protocol

    s = predict_study(ladder[0])
    calls = dict(arch=lambda: forecast.archs_of(predict_study(ladder[0], archs="llama,gdn"), lad),
                 sizes=lambda: lad.curves(SHORT),
                 factor=lambda: forecast.compute(predict_study(ladder[0], compute_factor=1.0), lad),
                 edge=lambda: forecast.predict_arch(s, lad, "llama", 3e4 * lad.largest.flops),
                 rule=lambda: protocol.rung_config(lad, "llama", "d96", 1e6, "as_given"))
    with pytest.raises(PredictError, match=re.escape(message)) as e:
        calls[what]()
    assert "\n" not in str(e.value)


def test_an_arch_added_later_is_appended_and_the_others_read_back(ladder, lad, planned, tmp_path):
    from linscale_jax.study.predict import forecast

    study, P, _ = planned
    stored = json.loads((Path(P) / "predictions.json").read_text())
    (tmp_path / "predictions.json").write_text(json.dumps(dict(stored, archs=dict(stored["archs"], llama="kept"))))
    fc = forecast.forecast(predict_study(ladder[0], archs="tnl,llama"), lad, str(tmp_path))
    assert list(fc["archs"]) == ["tnl", "llama"] and fc["archs"]["llama"] == "kept"  # read back, not made again
    on_disk = json.loads((tmp_path / "predictions.json").read_text())
    assert on_disk["settings"]["archs"] == ["llama", "tnl"] and on_disk["archs"]["llama"] == "kept"
    alone = forecast.predict_arch(predict_study(ladder[0], archs="tnl"), lad, "tnl", fc["compute"])
    assert json.loads(json.dumps(alone)) == on_disk["archs"]["tnl"]  # alone or added: the same prediction
    fc = forecast.forecast(predict_study(ladder[0], archs="tnl", bootstrap=21), lad, str(tmp_path))
    assert list(fc["archs"]) == ["tnl"] and fc["settings"]["archs"] == ["tnl"]  # other settings: made again


def test_rungs_chosen_train_alone_and_the_join_reads_every_rung(ladder, planned, tmp_path):
    study, P, runs = planned
    (tmp_path / "predictions.json").write_text((Path(P) / "predictions.json").read_text())
    s = predict_study(ladder[0], rungs="optimum")
    mine = experiment.plan(s, str(tmp_path))
    assert [r.name for r in mine] == [runs[1].name]
    fc = json.loads((tmp_path / "predictions.json").read_text())
    pred = {g["name"]: g["predicted"] for g in fc["archs"]["llama"]["rungs"]}
    below = experiment.runs_of(s, open_ladder(s), fc, str(tmp_path))[0]
    for r in (mine[0], below):  # a neighbour trained by an earlier invocation is read too
        fake_results(r, pred[r.name])
    joined = experiment.join(s, mine, str(tmp_path), Ctx())
    assert [r["actual"] is not None for r in joined["rows"]] == [True, True, False]
    w = joined["verdicts"]["archs"]["llama"]
    assert w["met"] and w["wins"]["verdict"] == "not measured"
    from linscale_jax.study.predict import report

    text = "\n".join(report.lines(joined))
    verdict = w["wins"]["by_neighbour"][below.size]["verdict"]
    assert f"vs {runs[2].size}: not measured" in text and f"vs {below.size}: {verdict.replace('_', ' ')} (" in text
    fake_results(below, pred[below.name] - 0.5)  # a neighbour far below N_opt: N_opt loses, whatever the other
    wins = experiment.join(s, mine, str(tmp_path), Ctx())["verdicts"]["archs"]["llama"]["wins"]
    assert (wins["verdict"], wins["lowest_actual"]) == ("loses", below.size)
    assert [r.name for r in experiment.plan(predict_study(ladder[0], rungs=below.name), str(tmp_path))] == [below.name]
    with pytest.raises(PredictError, match=re.escape("study.rungs names llama-d1, not a rung of this prediction")):
        experiment.plan(predict_study(ladder[0], rungs=f"{below.name},llama-d1"), str(tmp_path))


def test_each_rung_at_k_seeds_is_judged_on_their_mean(ladder, planned, tmp_path):
    """study.seeds=2: every rung trains twice (the replicate at train.seed + 1 in <rung>-seed1), the
    interval is for a mean of 2 runs (narrower than one run's, around the same point), a rung's actual
    is None until both seeds are measured and then their mean, and the wins use the mean's sd."""
    study, P, runs = planned
    s = predict_study(ladder[0], seeds=2)
    two = experiment.plan(s, str(tmp_path))
    assert [r.name for r in two] == [n for r in runs for n in (r.name, f"{r.name}-seed1")]
    assert [r.config.train.seed - two[0].config.train.seed for r in two] == [0, 1] * 3
    assert all(a.config.optim.lr == b.config.optim.lr and a.steps == b.steps for a, b in zip(two[::2], two[1::2]))
    one = json.loads((Path(P) / "predictions.json").read_text())["archs"]["llama"]["rungs"]
    fc = json.loads((tmp_path / "predictions.json").read_text())
    assert fc["settings"]["seeds"] == 2
    for g1, g2 in zip(one, fc["archs"]["llama"]["rungs"]):
        assert g2["predicted"] == g1["predicted"] and g2["ci_low"] > g1["ci_low"] and g2["ci_high"] < g1["ci_high"]
    pred = {g["name"]: g["predicted"] for g in fc["archs"]["llama"]["rungs"]}
    opt, opt1 = two[2], two[3]
    fake_results(opt, pred[opt.name] + 0.04)
    joined = experiment.join(s, two, str(tmp_path), Ctx())
    row = next(r for r in joined["rows"] if r["predicted_optimum"])
    assert (row["actual"], row["measured"], row["seeds"]) == (None, 1, 2)  # one of two seeds: not judged yet
    from linscale_jax.study.predict import report

    assert "— (1 of 2 seeds)" in "\n".join(report.lines(joined))
    fake_results(opt1, pred[opt.name] - 0.02)
    for r in (two[0], two[1], two[4], two[5]):
        fake_results(r, pred[r.name.removesuffix("-seed1")] + 0.2)
    joined = experiment.join(s, two, str(tmp_path), Ctx())
    row = next(r for r in joined["rows"] if r["predicted_optimum"])
    assert row["actual"] == pytest.approx(pred[opt.name] + 0.01)  # the mean of +0.04 and -0.02
    assert joined["verdicts"]["archs"]["llama"]["met"] and joined["study"]["seeds"] == 2
    text = "\n".join(report.lines(joined))
    assert "the mean of 2 observed runs" in text and "two means of 2 runs" in text and "0 of 6 runs processed" in text
    assert [r.name for r in experiment.plan(predict_study(ladder[0], seeds=2, rungs="optimum"), str(tmp_path))] == [
        opt.name, opt1.name]
    assert [r.name for r in experiment.plan(predict_study(ladder[0], seeds=2, rungs=opt1.name), str(tmp_path))] == [
        opt1.name]
    with pytest.raises(PredictError, match=r"study.seeds=0: the init seeds per rung must be a whole number >= 1"):
        experiment.plan(predict_study(ladder[0], seeds=0), str(tmp_path))


def test_another_estimator_of_the_ladder_predicts_from_its_own_table(ladder, lad, tmp_path):
    """--config.estimator=cooldown: the laws of the ladder's cooldown table (here the planted law
    0.1 nats lower) and that estimator's seed sd; an estimator the ladder did not run is one line."""
    import shutil

    from linscale_jax.study.predict import forecast

    other = tmp_path / "other"
    shutil.copytree(ladder[0], other)
    with open(other / files.STUDY_FIT / "table.csv") as f:
        rows = list(csv.DictReader(f))
    with open(other / files.STUDY_FIT / files.fit_table_name("cooldown", False), "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(dict(r, loss=repr(float(r["loss"]) - 0.1)) for r in rows)
    found = json.loads((other / files.FINDINGS_JSON).read_text())
    found["by_estimator"]["cooldown"] = dict(seed_sd_pooled=dict(sd=0.003, df=4.0, source="pooled"))
    (other / files.FINDINGS_JSON).write_text(json.dumps(found))

    cool = open_ladder(predict_study(str(other), estimator="cooldown"))
    assert (cool.estimator, os.path.basename(cool.table), cool.seed_sd().sd) == (
        "cooldown", "table_cooldown.csv", 0.003)
    assert open_ladder(predict_study(str(other))).table == str(other / files.STUDY_FIT / "table.csv")
    levels = [np.mean(c.loss) for c in lad.curves("llama")], [np.mean(c.loss) for c in cool.curves("llama")]
    np.testing.assert_allclose(np.subtract(*levels), 0.1, atol=1e-9)
    at = 4 * lad.largest.flops
    s = predict_study(str(other))
    val, cooled = ([r["predicted"] for r in forecast.predict_arch(s, x, "llama", at)["rungs"] if r["predicted_optimum"]]
                   for x in (lad, cool))
    assert 0.1 < val[0] - cooled[0] < 0.2, (val, cooled)  # 0.1 lower, at the cooldown's longer loss point
    with pytest.raises(PredictError, match=re.escape("--config.estimator=val_loss_avg is not an estimator of the "
                                                     "ladder")) as e:
        open_ladder(predict_study(str(other), estimator="val_loss_avg"))
    assert "\n" not in str(e.value)
