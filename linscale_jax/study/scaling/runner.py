"""The scaling study's steps (study.experiments' interface): its runs, one run, the join and the report.

    runs = plan(study, workdir)                  # plan.build_plan, each run marked final or not
    process_run(study, run, log, final)          # train or resume, evaluate, cooldowns
    joined = join(study, runs, workdir, ctx)     # table.csv, fit/, findings.json
    report(study, workdir, joined, ctx)          # report.md

Layout: DIR/runs/<arch>-<size>/ (a trainer workdir each: checkpoints/, metrics.jsonl, eval/),
DIR/table.csv (eval.export: every checkpoint, plus a seed column), DIR/fit/ (one table per loss
estimator of study.estimators, rows after the learning-rate warmup: table.csv the first one's,
which the laws use; table_cooldown.csv the cooled-down branches' (DIR/runs/<run>/cooldowns/<step>/,
scaling.cooldown), table_val_loss.csv / table_val_loss_avg.csv the others; fits.json + PNGs,
bracketing.csv, envelope.csv), DIR/holdout.csv (+ holdout_curves.csv, holdout.json: each arch's
largest size predicted by laws fitted without it, scaling.holdout), DIR/findings.json
(scaling.results: every result as data), DIR/report.md (scaling.report renders those files).
Resumable at every level: a run whose last checkpoint is its final step is not trained again, a
partial run resumes from its newest checkpoint (trainer.train), and eval.runner skips
(checkpoint, task) pairs already in a run's eval/results.jsonl. Per run: val_loss at every
checkpoint, then NIAH (at lengths within the trained context, and only where its shortest prompt
fits there: plan.niah_unmeasured) and the corpus probe (eval.probe) on the final checkpoint (of
every run, or of each arch's largest run with study.eval.final_runs = "largest").
Sharding, --join_only, the backends and the stop and failure lines are study.experiments' and
study.executor's, the same for every kind.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import jax
import numpy as np

from linscale_jax.study import files
from linscale_jax import contract, fit
from linscale_jax.errors import Stopped
from linscale_jax.parallel import distributed
from linscale_jax.study.scaling import findings, results
from linscale_jax.study.scaling import laws as scaling_laws
from linscale_jax.study.scaling import plan as plan_lib
from linscale_jax.study.scaling.plan import Estimator


def _print(msg: str) -> None:
    """Status lines come from process 0 only (every process runs the same study)."""
    if distributed.is_primary():
        print(msg, flush=True)


def trained(run) -> bool:
    from linscale_jax.run import checkpoint as ckpt

    steps = ckpt.list_steps(run.workdir)
    return bool(steps) and steps[-1] >= run.steps


def check_config(run) -> None:
    """Refuse (identity.RunIdentityError, the trainer's own line) a run whose newest checkpoint
    holds another config: a finished run is not trained again, so the trainer's check on resume
    never sees it."""
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.run import identity

    step = ckpt.list_steps(run.workdir)[-1]
    meta = ckpt.load_metadata(run.workdir, step)
    identity.check_resume(meta.get("config", {}), run.config, run.workdir, step)


def eval_context(study, run=None) -> dict:
    """The eval tasks' settings. study.eval.val_batches counts batches of the preset's
    overrides.train.batch_size sequences: a run with another batch (a learning-rate rule's) gets as
    many batches as make the same number of rows, so every run is scored on the same validation
    rows (data.eval_batches)."""
    try:
        grid = tuple(int(x) for x in str(study.eval.niah_grid).lower().split("x"))
        assert len(grid) == 2 and min(grid) >= 1
    except (ValueError, AssertionError):
        raise ValueError(f"study.eval.niah_grid must look like 4x4, got {study.eval.niah_grid!r}") from None
    return dict(val_batches=val_batches(study, run), niah_grid=grid, niah_in_context=True,
                probe_items=int(study.eval.probe_items))


def val_batches(study, run=None) -> int:
    """Validation batches of `run` (eval_context): val_batches × the preset's batch / the run's."""
    n = int(study.eval.val_batches)
    if run is None:
        return n
    return max(1, math.ceil(n * int(study.overrides.train.batch_size) / int(run.config.train.batch_size)))


def final_tasks(study, run) -> list[str]:
    """NIAH (where it can pass: plan.niah_unmeasured) and the corpus probe."""
    niah = str(study.eval.niah_task)
    return ([] if plan_lib.niah_unmeasured(run.config, niah) else [niah]) + ["probe"]


estimators = plan_lib.estimators


def fit_loss(study) -> str:
    """The laws' loss estimator: the first of study.estimators."""
    return estimators(study)[0]


def loss_tasks(study) -> tuple[str, ...]:
    """Evaluated at every checkpoint: val_loss, and val_loss_avg when it is an estimator."""
    return (Estimator.VAL_LOSS,) + ((Estimator.VAL_LOSS_AVG,) if Estimator.VAL_LOSS_AVG in estimators(study) else ())


def cooldown_dirs(run) -> list[str]:
    """The run's cooldown branch workdirs that exist (DIR/runs/<run>/cooldowns/<step>)."""
    root = os.path.join(run.workdir, files.COOLDOWNS)
    if not os.path.isdir(root):
        return []
    return [os.path.join(root, d) for d in sorted(os.listdir(root), key=lambda x: int(x) if x.isdigit() else -1)
            if d.isdigit()]


def run_cooldowns(study, run, ctx, log=_print) -> None:
    """Branch study.cooldown.points cooldowns off the run (study.cooldown) and evaluate each."""
    from linscale_jax.eval.runner import evaluate
    from linscale_jax.study.scaling import cooldown

    c = study.cooldown
    for step in cooldown.branch_steps(run.config, int(c.points)):
        out = os.path.join(run.workdir, files.COOLDOWNS, str(step))
        cooldown.cooldown(run.config, run.workdir, step, float(c.fraction), out, shape=str(c.shape),
                          val_batches=ctx["val_batches"])  # its val_loss row scored in memory
        evaluate(out, "all", ("val_loss",), ctx_kwargs=ctx, log=log)


_COMPILE_S = [0.0]  # seconds XLA spent compiling (or reading the persistent cache) in this process


def _on_event(event: str, duration: float, **_) -> None:
    if event in ("/jax/core/compile/backend_compile_duration",
                 "/jax/compilation_cache/cache_retrieval_time_sec"):
        _COMPILE_S[0] += duration


def _compile_clock() -> float:
    if not getattr(_compile_clock, "registered", False):
        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _compile_clock.registered = True
    return _COMPILE_S[0]


def process_run(study, run, log=_print, final: bool = True) -> None:
    """Train (or resume) one run, evaluate every checkpoint (val_loss) and, when `final`, run the
    final-checkpoint tasks (NIAH, the corpus probe). Appends this invocation's wall time (train,
    eval, and the compile share of each) to <run>/timing.jsonl. A run whose checkpoints hold
    another config is refused, finished or not, with the trainer's line (identity.RunIdentityError;
    an application error on every backend: never retried)."""
    from linscale_jax.eval.checkpoint_scores import CheckpointScores
    from linscale_jax.eval.runner import evaluate
    from linscale_jax.train import loop as trainer

    c0, t0 = _compile_clock(), time.time()
    ctx = eval_context(study, run)
    trained_here = not trained(run)
    if trained_here:  # each checkpoint's val_loss row scored by the trainer (eval restores none)
        summary = trainer.train(run.config, run.workdir,
                                scores=CheckpointScores(run.config, run.workdir, ctx["val_batches"]))
        if summary.get("stopped"):
            raise Stopped(f"[study] stopped by {summary['stopped']}: {run.name} saved its checkpoint at "
                          f"step {summary['step']}; re-run the same command to resume.")
    else:
        check_config(run)
        log(f"[study] {run.name}: trained already ({run.steps} steps), skipping training")
    c1, t1 = _compile_clock(), time.time()
    evaluate(run.workdir, "all", loss_tasks(study), ctx_kwargs=ctx, log=log)
    if final:
        evaluate(run.workdir, "last", final_tasks(study, run), ctx_kwargs=ctx, log=log)
    c2, t2 = _compile_clock(), time.time()
    if Estimator.COOLDOWN in estimators(study):
        run_cooldowns(study, run, ctx, log)
    c3, t3 = _compile_clock(), time.time()
    if distributed.is_primary():
        with open(os.path.join(run.workdir, files.TIMING), "a") as f:
            f.write(json.dumps(dict(trained=trained_here, train_s=round(t1 - t0, 2),
                                    train_compile_s=round(c1 - c0, 2), eval_s=round(t2 - t1, 2),
                                    eval_compile_s=round(c2 - c1, 2), cooldown_s=round(t3 - t2, 2),
                                    cooldown_compile_s=round(c3 - c2, 2), end=round(t3, 1))) + "\n")


def plan(study, workdir: str) -> list:
    """The study's runs (plan.build_plan), each marked `final` when it gets the final-checkpoint
    tasks (seed 0, and every run or each arch's largest: study.eval.final_runs); the inputs that
    other studies give (recall_from, protocol_from) and the estimators are checked first, so a wrong
    one fails before anything trains."""
    runs = plan_lib.build_plan(study, workdir)
    findings.recall_rows_from(study)  # a wrong study.recall_from (or protocol_from) fails now, not after training
    results.protocol_sources(study, runs)
    if Estimator.COOLDOWN in estimators(study) and str(study.overrides.optim.get("schedule", "")) != "constant":
        raise ValueError(f"study.estimators has cooldown, which branches off a constant learning rate, but "
                         f"overrides.optim.schedule is {study.overrides.optim.get('schedule')!r}: set "
                         "--config.overrides.optim.schedule=constant or drop cooldown from study.estimators")
    largest = {}
    for r in runs:
        largest[r.arch] = max(largest.get(r.arch, 0), r.n_params)
    for r in runs:
        r.final = r.seed == 0 and (str(study.eval.final_runs) == "all" or r.n_params == largest[r.arch])
    return runs


def start(study, workdir: str, runs) -> None:
    """DIR/plan.txt: the dry-run listing of every run (a record for the hosts of a sharded study)."""
    with open(files.study_path(workdir, files.STUDY_PLAN), "w") as f:
        f.write(plan_lib.dry_run_text(runs) + "\n")


def dry_run(study, runs, spec: str | None = None) -> str:
    return plan_lib.dry_run_text(runs, spec)


def join(study, runs, workdir: str, ctx) -> dict:
    """DIR/table.csv from every run's eval rows, DIR/fit/table.csv (the rows after the warmup, which
    the fits, plots and comparisons use), fits (DIR/fit/), then the results as data (study.results:
    findings.json, holdout, bracketing; with the wall time of this invocation's runs, ctx.runs_s,
    when it processed any)."""
    t0, log = time.time(), ctx.log
    from linscale_jax.eval.export import collect, write_csv

    approach = int(ctx.options.approach or study.fit.approach)
    if approach not in (1, 2, 3):
        raise ValueError(f"--approach must be 1, 2 or 3, got {approach}; pass one of those.")
    have = [r for r in runs if os.path.exists(os.path.join(r.workdir, contract.EVAL_RESULTS))]
    if not have:
        raise FileNotFoundError(f"no evaluated runs under {workdir}/{files.STUDY_RUNS}; train some first")
    seed_of = {r.name: r.seed for r in runs}
    # the study's arch label: a variant run (cosformer2+tpe=none) is its own arch in every table,
    # not the model config's arch
    arch_of = {r.name: r.arch for r in runs}

    def labelled(row):
        return {**row, "arch": arch_of.get(row["run"], row["arch"]), "seed": seed_of.get(row["run"], "")}

    table = files.study_path(workdir, files.STUDY_TABLE)
    rows = [labelled(r) for r in collect([r.workdir for r in have])]
    write_csv(rows, table)
    log(f"[study] joined {len(have)}/{len(runs)} run(s) into {table}")
    fit_dir = files.study_path(workdir, files.STUDY_FIT)
    os.makedirs(fit_dir, exist_ok=True)
    warmup = plan_lib.fit_min_step(runs)
    after = [r for r in rows if int(r["step"]) >= warmup]
    for i, name in enumerate(estimators(study)):  # one fit table per estimator, the first the laws'
        if name is Estimator.VAL_LOSS:
            est = after
        elif name is Estimator.VAL_LOSS_AVG:
            est = [{**r, "loss": r.get("val_loss_avg.val_loss")} for r in after]
        else:
            dirs = [d for r in have for d in cooldown_dirs(r)
                    if os.path.exists(os.path.join(d, contract.EVAL_RESULTS))]
            est = [labelled(r) for r in collect(dirs)] if dirs else []
        if est:
            write_csv(est, os.path.join(fit_dir, files.fit_table_name(name, i == 0)))
    fit_table = os.path.join(fit_dir, files.fit_table_name(fit_loss(study), True))
    if not os.path.exists(fit_table):
        raise FileNotFoundError(f"no {fit_loss(study)} rows to fit in {workdir}; evaluate the runs first")
    errors = fit_laws(study, fit_table, fit_dir, approach, log)
    found = results.write(study, runs, workdir, errors, dict(runs_s=ctx.runs_s, workers=ctx.slots, t0=t0))
    return {"table": table, "fit_dir": fit_dir, "fit_errors": errors, "findings": found}


def report(study, workdir: str, joined: dict, ctx) -> str:
    """report.md rendered from the joined files (study.report), and the findings' console lines."""
    from linscale_jax.study.scaling import report as report_lib

    path = report_lib.write_report(workdir)
    for line in findings.console_lines(joined["findings"]) + scaling_laws.console_lines(joined["findings"]):
        ctx.log(line)
    return path


def fit_laws(study, table_path: str, out: str, approach: int, log=_print) -> dict:
    """Fit every arch that can be fitted (fit.fit_table, written to ``out``); returns {arch: error}
    for those that cannot."""
    options = fit.FitOptions(approach=int(approach), compute_unit="pf-days",
                             bootstrap=int(study.fit.bootstrap), seed=int(study.fit.seed),
                             include_clamped=bool(study.fit.include_clamped))
    table = fit.load(table_path)
    in_unit = table.with_compute_unit("pf-days")
    errors, good = {}, []
    for arch in table.archs:
        try:
            fit.fit_arch(in_unit.select(arch), options)
            good.append(arch)
        except fit.FitError as e:
            errors[arch] = str(e)
            log(f"[study] fit {arch}: {e}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, files.FIT_ERRORS), "w") as f:
        json.dump(errors, f, indent=2)
    if good:
        options = dataclasses.replace(options, archs=tuple(good))
        progress = (lambda line: log(line) if "ETA" in line else None)  # noqa: E731  (slow bootstraps only)
        try:
            result = fit.fit_table(table, options, log=progress)
        except fit.FitError as e:  # e.g. too many failed bootstrap resamples
            log(f"[study] fit with bootstrap failed ({e}); refitting without intervals")
            result = fit.fit_table(table, dataclasses.replace(options, bootstrap=0), log=progress)
            errors["bootstrap"] = str(e)
        fits_json, *pngs = result.write(out)
        for a, e in result.fits.items():  # one line per arch; the ranges are in fits.json and the report
            env = getattr(result.results[a], "envelope", None)
            bound = "" if env is None else f"; envelope interior on {np.mean(env.clamped == 0):.0%} of the compute grid"
            log(f"[study] fit {a}: L(C) = {e['L_C']['coefficient']:.4g}·C^{e['L_C']['exponent']:+.4f}{bound}")
        log(f"[study] wrote {fits_json} and {', '.join(p.name for p in pngs)}")
    return errors
