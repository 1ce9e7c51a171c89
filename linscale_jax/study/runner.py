"""Run a study: train every run, evaluate its checkpoints, then join, fit and report.

    summary = run_study(study, workdir, shard_spec=None, approach=None, max_runs=None)

Layout: DIR/runs/<arch>-<size>/ (a trainer workdir each: checkpoints/, metrics.jsonl, eval/),
DIR/table.csv (eval.export: every checkpoint, plus a seed column), DIR/fit/ (one table per loss
estimator of study.estimators, rows after the learning-rate warmup: table.csv the first one's,
which the laws use; table_cooldown.csv the cooled-down branches' (DIR/runs/<run>/cooldowns/<step>/,
study.cooldown), table_val_loss.csv / table_val_loss_avg.csv the others; fits.json + PNGs,
bracketing.csv, envelope.csv), DIR/holdout.csv (+ holdout_curves.csv, holdout.json: each arch's
largest size predicted by laws fitted without it, study.holdout), DIR/findings.json (study.results:
every result as data), DIR/report.md (study.report renders those files).
Resumable at every level: a run whose last checkpoint is its final step is not trained again, a
partial run resumes from its newest checkpoint (trainer.train), and eval.runner skips
(checkpoint, task) pairs already in a run's eval/results.jsonl. Per run: val_loss at every
checkpoint, then NIAH and the corpus probe (eval.probe) on the final checkpoint (of
every run, or of each arch's largest run with study.eval.final_runs = "largest").
With shard_spec 'i/n' only runs with index % n == i are processed and nothing is joined; an
unsharded invocation trains what is still missing and joins whatever exists.
join_only skips training and evaluation and joins whatever the workdir holds (while other hosts
are still training). max_runs stops after that many runs were processed here (a simulated kill).
backend="ray" processes the runs as Ray tasks, on this machine or on the cluster at ray_address
(study.ray_backend); "local" (the default) in this process or study.workers' local pool.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import jax
import numpy as np

from linscale_jax import fit
from linscale_jax.study import plan as plan_lib
from linscale_jax.study import findings, results, workers
from linscale_jax import contract
from linscale_jax.parallel import distributed
from linscale_jax.errors import Stopped
from linscale_jax.run import signals
from linscale_jax.train.metrics import fmt_time


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
    return dict(val_batches=val_batches(study, run), niah_grid=grid,
                probe_items=int(study.eval.probe_items))


def val_batches(study, run=None) -> int:
    """Validation batches of `run` (eval_context): val_batches × the preset's batch / the run's."""
    n = int(study.eval.val_batches)
    if run is None:
        return n
    return max(1, math.ceil(n * int(study.overrides.train.batch_size) / int(run.config.train.batch_size)))


def final_tasks(study) -> list[str]:
    return [str(study.eval.niah_task), "probe"]


estimators = plan_lib.estimators


def fit_loss(study) -> str:
    """The laws' loss estimator: the first of study.estimators."""
    return estimators(study)[0]


def loss_tasks(study) -> tuple[str, ...]:
    """Evaluated at every checkpoint: val_loss, and val_loss_avg when it is an estimator."""
    return ("val_loss",) + (("val_loss_avg",) if "val_loss_avg" in estimators(study) else ())


def cooldown_dirs(run) -> list[str]:
    """The run's cooldown branch workdirs that exist (DIR/runs/<run>/cooldowns/<step>)."""
    root = os.path.join(run.workdir, contract.COOLDOWNS)
    if not os.path.isdir(root):
        return []
    return [os.path.join(root, d) for d in sorted(os.listdir(root), key=lambda x: int(x) if x.isdigit() else -1)
            if d.isdigit()]


def run_cooldowns(study, run, ctx, log=_print) -> None:
    """Branch study.cooldown.points cooldowns off the run (study.cooldown) and evaluate each."""
    from linscale_jax.eval.runner import evaluate
    from linscale_jax.study import cooldown

    c = study.cooldown
    for step in cooldown.branch_steps(run.config, int(c.points)):
        out = os.path.join(run.workdir, contract.COOLDOWNS, str(step))
        cooldown.cooldown(run.config, run.workdir, step, float(c.fraction), out, shape=str(c.shape))
        evaluate(out, "all", ("val_loss",), ctx_kwargs=ctx, log=log)


def eta_seconds(timed: list, todo: list) -> float:
    """Seconds the runs `todo` (their exact FLOPs) will take, from t = a + b·FLOPs fitted to the
    runs `timed` so far ((FLOPs, seconds) pairs; at least one)."""
    f, t = (np.array(x, float) for x in zip(*timed))
    if len(timed) >= 3 and np.ptp(f) > 0.5 * f.mean():  # sizes far enough apart to fit a slope
        b = max(float(np.polyfit(f, t, 1)[0]), 0.0)
        a = max(float(np.mean(t - b * f)), 0.0)
    else:  # time proportional to FLOPs (an overestimate for small runs, whose compile dominates)
        a, b = 0.0, float(np.sum(t) / np.sum(f))
    return sum(a + b * x for x in todo)


def eta(timed: list, todo: list) -> str:
    """'ETA 4m05s' of the runs still to train (eta_seconds)."""
    if not todo:
        return "ETA 0m00s (evaluation only)"
    if not timed:
        return "ETA after the first run"
    return f"ETA {fmt_time(eta_seconds(timed, todo))}"


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
    from linscale_jax.eval.runner import evaluate
    from linscale_jax.train import loop as trainer

    c0, t0 = _compile_clock(), time.time()
    trained_here = not trained(run)
    if trained_here:
        summary = trainer.train(run.config, run.workdir)
        if summary.get("stopped"):
            raise Stopped(f"[study] stopped by {summary['stopped']}: {run.name} saved its checkpoint at "
                          f"step {summary['step']}; re-run the same command to resume.")
    else:
        check_config(run)
        log(f"[study] {run.name}: trained already ({run.steps} steps), skipping training")
    c1, t1 = _compile_clock(), time.time()
    ctx = eval_context(study, run)
    evaluate(run.workdir, "all", loss_tasks(study), ctx_kwargs=ctx, log=log)
    if final:
        evaluate(run.workdir, "last", final_tasks(study), ctx_kwargs=ctx, log=log)
    c2, t2 = _compile_clock(), time.time()
    if "cooldown" in estimators(study):
        run_cooldowns(study, run, ctx, log)
    c3, t3 = _compile_clock(), time.time()
    if distributed.is_primary():
        with open(os.path.join(run.workdir, contract.TIMING), "a") as f:
            f.write(json.dumps(dict(trained=trained_here, train_s=round(t1 - t0, 2),
                                    train_compile_s=round(c1 - c0, 2), eval_s=round(t2 - t1, 2),
                                    eval_compile_s=round(c2 - c1, 2), cooldown_s=round(t3 - t2, 2),
                                    cooldown_compile_s=round(c3 - c2, 2), end=round(t3, 1))) + "\n")


def join(study, runs, workdir: str, approach: int, log=_print, runs_wall_s: float | None = None,
         workers: int = 1) -> dict:
    """DIR/table.csv from every run's eval rows, DIR/fit/table.csv (the rows after the warmup, which
    the fits, plots and comparisons use), fits (DIR/fit/), the results as data (study.results:
    findings.json, holdout, bracketing; with the wall time of this invocation's runs phase,
    runs_wall_s, when given), then report.md rendered from them (study.report)."""
    t0 = time.time()
    from linscale_jax.eval.export import collect, write_csv
    from linscale_jax.study import report

    have = [r for r in runs if os.path.exists(os.path.join(r.workdir, contract.EVAL_RESULTS))]
    if not have:
        raise FileNotFoundError(f"no evaluated runs under {workdir}/{contract.STUDY_RUNS}; train some first")
    seed_of = {r.name: r.seed for r in runs}
    # the study's arch label: a variant run (cosformer2+tpe=none) is its own arch in every table,
    # not the model config's arch
    arch_of = {r.name: r.arch for r in runs}

    def labelled(row):
        return {**row, "arch": arch_of.get(row["run"], row["arch"]), "seed": seed_of.get(row["run"], "")}

    table = contract.study_path(workdir, contract.STUDY_TABLE)
    rows = [labelled(r) for r in collect([r.workdir for r in have])]
    write_csv(rows, table)
    log(f"[study] joined {len(have)}/{len(runs)} run(s) into {table}")
    fit_dir = contract.study_path(workdir, contract.STUDY_FIT)
    os.makedirs(fit_dir, exist_ok=True)
    warmup = plan_lib.fit_min_step(runs)
    after = [r for r in rows if int(r["step"]) >= warmup]
    for i, name in enumerate(estimators(study)):  # one fit table per estimator, the first the laws'
        if name == "val_loss":
            est = after
        elif name == "val_loss_avg":
            est = [{**r, "loss": r.get("val_loss_avg.val_loss")} for r in after]
        else:
            dirs = [d for r in have for d in cooldown_dirs(r)
                    if os.path.exists(os.path.join(d, contract.EVAL_RESULTS))]
            est = [labelled(r) for r in collect(dirs)] if dirs else []
        if est:
            write_csv(est, os.path.join(fit_dir, contract.fit_table_name(name, i == 0)))
    fit_table = os.path.join(fit_dir, contract.fit_table_name(fit_loss(study), True))
    if not os.path.exists(fit_table):
        raise FileNotFoundError(f"no {fit_loss(study)} rows to fit in {workdir}; evaluate the runs first")
    errors = fit_laws(study, fit_table, fit_dir, approach, log)
    found = results.write(study, runs, workdir, errors, dict(runs_s=runs_wall_s, workers=workers, t0=t0))
    path = report.write_report(workdir)
    for line in findings.console_lines(found):
        log(line)
    log(f"[study] report: {path}")
    return {"table": table, "fit_dir": fit_dir, "report": path, "fit_errors": errors}


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
    with open(os.path.join(out, contract.FIT_ERRORS), "w") as f:
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


def workers_for(study, n_runs: int, max_runs: int | None) -> int:
    """How many runs train at once (study.workers, at most one per run; one under a multi-process
    launch, where every run spans all hosts, and with max_runs)."""
    n = int(study.get("workers", 1))
    if n < 1:
        raise ValueError(f"study.workers must be >= 1, got {n}")
    if n > 1 and jax.process_count() > 1:
        raise ValueError(f"study.workers={n} trains several runs in local processes; a multi-process "
                         "launch trains one run at a time over every host: set --config.workers=1")
    return 1 if max_runs is not None else max(1, min(n, n_runs))


BACKENDS = ("local", "ray")


def run_study(study, workdir: str, shard_spec: str | None = None, approach: int | None = None,
              max_runs: int | None = None, join_only: bool = False, log=_print,
              backend: str = "local", ray_address: str | None = None) -> dict:
    runs = plan_lib.build_plan(study, workdir)
    findings.recall_rows_from(study)  # a wrong study.recall_from (or protocol_from) fails now, not after training
    results.protocol_sources(study, runs)
    if "cooldown" in estimators(study) and str(study.overrides.optim.get("schedule", "")) != "constant":
        raise ValueError(f"study.estimators has cooldown, which branches off a constant learning rate, but "
                         f"overrides.optim.schedule is {study.overrides.optim.get('schedule')!r}: set "
                         "--config.overrides.optim.schedule=constant or drop cooldown from study.estimators")
    mine = [] if join_only else plan_lib.shard(runs, shard_spec)
    approach = int(approach or study.fit.approach)
    if distributed.is_primary():  # shared files: process 0 writes, the others read
        os.makedirs(workdir, exist_ok=True)
        with open(contract.study_path(workdir, contract.STUDY_PLAN), "w") as f:
            f.write(plan_lib.dry_run_text(runs) + "\n")
    t0, processed, timed = time.time(), 0, []  # timed: (exact FLOPs, seconds) of runs trained here
    largest = {}
    for r in runs:
        largest[r.arch] = max(largest.get(r.arch, 0), r.n_params)
    finals = {r.name: r.seed == 0 and (str(study.eval.final_runs) == "all" or r.n_params == largest[r.arch])
              for r in runs}
    if backend not in BACKENDS:
        raise ValueError(f"--backend={backend!r}; use one of {', '.join(BACKENDS)}")
    n_workers, out = workers_for(study, len(mine), max_runs), None
    if backend == "ray" and mine:  # Ray tasks on this machine or a cluster (study.ray_backend)
        from linscale_jax.study import ray_backend

        out = ray_backend.run(study, mine, finals, process_run, workdir, ray_address, log, eta_seconds)
        n_workers = out["slots"]
    elif n_workers > 1:
        out = workers.run_parallel(study, mine, finals, n_workers, process_run, log, eta_seconds)
    if out is not None:
        processed = len(mine)
        if out["stopped"] or out.get("signal"):
            raise Stopped(f"[study] stopped by {out.get('signal') or 'a signal'}: "
                          f"{', '.join(out['stopped']) or 'no run was under way'} saved "
                          "(checkpoints, eval rows so far); re-run the same command to resume.")
        if out["failed"]:
            raise workers.RunsFailed(f"{len(out['failed'])} run(s) failed, the others finished; fix and "
                               "re-run to resume: " + "; ".join(f"{k}: {v}" for k, v in out["failed"].items()))
    for k, run in enumerate(mine if out is None else []):
        done = sum(trained(r) for r in runs)
        todo = [r.flops_exact for r in mine[k:] if not trained(r)]
        log(f"[study] run {k + 1}/{len(mine)}{' of shard ' + shard_spec if shard_spec else ''}: {run.name} "
            f"(N={run.n_params:.3g}, {run.steps} steps, C={run.pf_days:.3g} PF-days) | study runs "
            f"trained {done}/{len(runs)} | elapsed {fmt_time(time.time() - t0)} | {eta(timed, todo)}")
        was_trained, t_run = trained(run), time.time()
        try:
            process_run(study, run, log, final=finals[run.name])
        except signals.Interrupted as e:  # outside the trainer's step loop (which saves first)
            raise Stopped(f"[study] stopped by {e} during {run.name}; its checkpoints and eval rows "
                          "so far are kept; re-run the same command to resume.") from None
        if not was_trained:
            timed.append((run.flops_exact, time.time() - t_run))
        processed += 1
        if max_runs is not None and processed >= max_runs and k + 1 < len(mine):
            log(f"[study] stopping after {processed} run(s) (max_runs); re-run to continue")
            return {"stopped": True, "runs": len(runs), "processed": processed}
    log(f"[study] {len(mine)} run(s) processed in {fmt_time(time.time() - t0)}")
    if shard_spec and plan_lib.parse_shard(shard_spec)[1] > 1:
        log("[study] sharded invocation: run without --shard to join the results, fit and report")
        return {"stopped": False, "runs": len(runs), "processed": processed}
    if not distributed.is_primary():  # the table, fits and report are written by process 0 alone
        return {"stopped": False, "runs": len(runs), "processed": processed}
    t_join = time.time()
    out = join(study, runs, workdir, approach, log, workers=n_workers,
               runs_wall_s=None if join_only else t_join - t0)
    log(f"[study] runs {fmt_time(t_join - t0)} on {n_workers} worker(s), join + fits + report "
        f"{fmt_time(time.time() - t_join)}, total {fmt_time(time.time() - t0)}")
    return {"stopped": False, "runs": len(runs), "processed": processed, "seconds": time.time() - t0, **out}
