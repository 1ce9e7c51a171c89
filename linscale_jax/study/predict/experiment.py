"""The prediction beyond a ladder as an experiment (kind "predict", study.experiments; staged).

    runs = plan(study, P)               # stage 1: the replicate runs the ladder lacks (study.replicates, top_up),
                                        # trained in P/ladder; stage 2: the completed ladder joined and opened,
                                        # the prediction made (P/predictions.json), 3 rungs per arch
                                        # (study.rungs: all, optimum = N_opt alone, or a list), study.seeds runs
                                        # each, those not processed yet
    process_run(study, run, log, final) # one rung trained under the ladder's protocol, its loss point measured
    joined = join(study, runs, P, ctx)  # P/prediction.csv, P/prediction.png, the verdicts and
                                        # P/prediction_curves.csv (the error along each rung's tokens: along)
    report(study, P, joined, ctx)       # P/report.md

A rung is a scaling run (scaling.plan.make_run) in P/runs/<arch>-<size>/ (its replicates, with
study.seeds > 1, in P/runs/<arch>-<size>-seed<k>/), processed by the scaling
kind's own step (scaling.runner.process_run with the ladder's preset: every checkpoint's val_loss,
and under the cooldown estimator one cooldown branch, off the last checkpoint). A run added to the
ladder (P/ladder/runs/) is processed as the ladder's own runs are (every cooldown branch).
"""

from __future__ import annotations

import os

from linscale_jax.contract import split_list
from linscale_jax.study import files
from linscale_jax.study.predict import forecast as fc_lib
from linscale_jax.study.predict import along, outcome, protocol, top_up
from linscale_jax.study.predict.ladder import PredictError, open_ladder

PREDICTION_CSV = "prediction.csv"
PREDICTION_PNG = "prediction.png"
PREDICTION_CURVES_CSV = "prediction_curves.csv"


def runs_of(study, lad, fc: dict, workdir: str) -> list:
    """The rungs of every arch of the prediction as scaling.plan.Run, each at study.seeds init seeds
    (index order: arch, then N, then seed)."""
    from linscale_jax.study.scaling import plan as plan_lib

    runs = []
    for arch, p in fc["archs"].items():
        for g in p["rungs"]:
            for k in range(fc_lib.seeds_of(study)):
                cfg, _ = protocol.rung_config(lad, arch, g["size"], g["budget_tokens"], str(study.rule), k)
                runs.append(plan_lib.make_run(lad.study, cfg, arch, g["size"], k, workdir, index=len(runs)))
    return runs


def ladder_of(study, workdir: str, log=None):
    """The ladder the laws predict from: study.ladder_from, completed in P/ladder when study.replicates
    adds runs to it (top_up.completed; they must be trained)."""
    from linscale_jax.study import experiments

    ctx = experiments.Context(log or experiments.say, experiments.Options())
    return top_up.completed(study, open_ladder(study), workdir, ctx)


def plan(study, workdir: str) -> list:
    """Stage 1: the replicate runs the ladder lacks (top_up.pending), while any is unprocessed. Stage 2:
    the rungs to train (study.rungs) not processed yet, each at study.seeds seeds: all (every arch's
    three), optimum (every arch's N_opt alone: its loss is checked, whether it wins is not measured) or a
    comma list of rung names (<arch>-<size>: every seed of it; <arch>-<size>-seed<k>: that replicate
    alone); the join reads every rung trained in P, by this invocation or an earlier one."""
    added = top_up.pending(study, open_ladder(study), workdir)
    if added:
        return added
    return [r for r in _rungs(study, workdir) if not top_up.processed(r)]


def _rungs(study, workdir: str) -> list:
    lad = ladder_of(study, workdir)
    fc = fc_lib.forecast(study, lad, workdir)
    runs = runs_of(study, lad, fc, workdir)
    which = str(study.get("rungs", "all") or "all")
    if which == "all":
        return runs
    if which == "optimum":
        opt = {(a, g["size"]) for a, p in fc["archs"].items() for g in p["rungs"] if g["predicted_optimum"]}
        return [r for r in runs if (r.arch, r.size) in opt]
    want = split_list(which, "study.rungs")
    names = {r.name for r in runs} | {f"{r.arch}-{r.size}" for r in runs}
    unknown = [n for n in want if n not in names]
    if unknown:
        raise PredictError(f"study.rungs names {', '.join(unknown)}, not a rung of this prediction (its rungs: "
                           f"{', '.join(dict.fromkeys(f'{r.arch}-{r.size}' for r in runs))}"
                           + (f"; one replicate alone: <arch>-<size>-seed1 .. seed{fc_lib.seeds_of(study) - 1}"
                              if fc_lib.seeds_of(study) > 1 else "")
                           + "); pass all, optimum or some of those")
    return [r for r in runs if r.name in want or f"{r.arch}-{r.size}" in want]


def dry_run(study, runs, spec: str | None = None) -> str:
    """--dry_run: the rungs, then the prediction plan() wrote (report.forecast_lines); or the replicate runs
    the ladder lacks, which the prediction waits for."""
    from linscale_jax.study.experiments import listing
    from linscale_jax.study.predict import report as report_lib

    text = listing(study, runs, spec)
    if not runs:
        return text
    if top_up.is_added(runs[0]):
        return "\n".join([text, f"[predict] these replicate runs complete the ladder {study.ladder_from} in "
                           f"{os.path.dirname(os.path.dirname(runs[0].workdir))} (study.replicates); the prediction "
                           "is made from its laws once they are trained"])
    workdir = os.path.dirname(os.path.dirname(runs[0].workdir))  # P/runs/<name>
    fc = fc_lib.forecast(study, ladder_of(study, workdir), workdir)
    return "\n".join([text, *report_lib.forecast_lines(fc)])


def ladder_study(study):
    """The ladder's preset as a rung's processing uses it: one cooldown branch, off the last checkpoint."""
    from linscale_jax.study.presets import preset

    lad = preset(str(study.ladder_preset))
    lad.cooldown.points = 1
    return lad


def process_run(study, run, log=print, final: bool = False) -> None:
    """A rung under ladder_study; a run added to the ladder as the ladder's own (top_up.extended)."""
    from linscale_jax.study.scaling import runner

    if top_up.is_added(run):
        runner.process_run(top_up.extended(study, open_ladder(study)), run, log=log, final=run.final)
    else:
        runner.process_run(ladder_study(study), run, log=log, final=False)


def cost(runs) -> dict:
    """{"runs": {name: seconds}, "seconds", "trained"}: every invocation's train + eval + cooldown wall
    seconds per run (its timing.jsonl)."""
    from linscale_jax.study.scaling.results import timing

    per = {}
    for r in runs:
        if os.path.exists(os.path.join(r.workdir, files.TIMING)):
            t = timing(r)
            per[r.name] = t["train_s"] + t["eval_s"] + t["cooldown_s"]
    return dict(runs=per, seconds=sum(per.values()), trained=len(per))


def join(study, runs, workdir: str, ctx) -> dict:
    """P/prediction.csv and P/prediction.png from the prediction and whatever rungs are measured in P,
    trained by this invocation or an earlier one (`runs`, this invocation's, are not consulted)."""
    from linscale_jax.study.predict import figure

    lad = ladder_of(study, workdir, ctx.log)
    fc = fc_lib.forecast(study, lad, workdir)
    runs = runs_of(study, lad, fc, workdir)
    rows = outcome.rows_of(fc, runs, lad.estimator)
    outcome.write_csv(rows, os.path.join(workdir, PREDICTION_CSV))
    verdicts = outcome.judge(fc, rows, lad.seed_sd(), lad.margin(), float(study.target), int(study.seed),
                             fc_lib.seeds_of(study))
    figure.plot(fc, rows, os.path.join(workdir, PREDICTION_PNG))
    path = along.rows_of(fc, runs, lad.estimator)
    along.write_csv(path, os.path.join(workdir, PREDICTION_CURVES_CSV))
    added = [r for r in lad.runs if r.name in lad.added]
    return dict(forecast=fc, rows=rows, verdicts=verdicts, along=along.summary(path, along.seen_of(lad, fc)),
                cost=dict(cost(runs), runs_s=ctx.runs_s, slots=ctx.slots, added=cost(added) if added else None),
                study=dict(ladder_preset=str(study.ladder_preset), rule=str(study.rule),
                           compute_factor=float(study.compute_factor), seeds=fc_lib.seeds_of(study)))


def report(study, workdir: str, joined: dict, ctx) -> str:
    from linscale_jax.study.predict import report as report_lib

    path = os.path.join(workdir, files.REPORT_MD)
    with open(path, "w") as f:
        f.write("\n".join(report_lib.lines(joined)) + "\n")
    for line in report_lib.console_lines(joined):
        ctx.log(line)
    return path
