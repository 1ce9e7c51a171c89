"""The kinds of experiment a study preset runs, as a registry, and the one way every kind is run.

    from linscale_jax.study import experiments
    experiments.register(experiments.Experiment(kind=Kind.RECALL, plan=..., process=..., join=...,
                                                report=...))      # in the kind's __init__.py
    out = experiments.run(study, workdir, experiments.Options(backend="ray"))

A kind is one folder under linscale_jax/study/ whose __init__.py calls `experiments.register(`
(`discover` imports each such folder, as the arch registry imports arch modules). The preset
declares its kind (`study.kind`, a value of Kind). Every kind offers the same four steps:

  plan(study, workdir) -> runs        the runs the experiment wants (a staged kind: the runs of its
                                      next stage still to process; [] once every stage is done)
  process(study, run, log, final)     one run, resumable; a module-level function, so the local
                                      pool's processes and Ray tasks import it by name
  join(study, runs, workdir, ctx)     the results as data, from whatever runs have finished
  report(study, workdir, joined, ctx) the report, from the joined results; returns its path

and optionally `start` (before the runs, e.g. the plan's listing), `finished(study, run)` (a run
whose result is stored and needs no processing), `dry_run(study, runs, shard)` (the --dry_run text) and
`staged` (plan is asked again after each stage). `run` drives them: plan, shard, the executor
(study.executor: serial, the local pool or Ray, one outcome per run, one stop or failure line),
join, report. How to add a kind: docs/study.md, "Adding an experiment".
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
import time
from enum import StrEnum
from typing import Callable

from linscale_jax.parallel import distributed
from linscale_jax.study import executor
from linscale_jax.study.executor import Backend
from linscale_jax.train.metrics import fmt_time


class Kind(StrEnum):
    """The kinds of experiment (a preset's `kind`)."""

    SCALING = "scaling"  # archs × sizes on one token budget, laws fitted, the findings judged
    TUNE = "tune"  # the staged grid of learning rate, batch and β2 per size (the tuned rule)
    RECALL = "recall"  # MQAR accuracy against state size
    NOISE = "noise"  # the noise sources of a loss point, on one small size
    CALIBRATE = "calibrate"  # the verdicts on simulations of a finished study's design
    PREDICT = "predict"  # N_opt and its loss beyond a finished study's ladder, then trained and compared


@dataclasses.dataclass(frozen=True)
class Options:
    """How a study is run (the command line's flags)."""

    backend: Backend = Backend.LOCAL
    ray_address: str | None = None
    shard: str | None = None  # 'i/n': the runs with index % n == i, nothing joined
    join_only: bool = False  # process nothing: join and report what exists
    dry_run: bool = False  # print the runs; process nothing
    approach: int | None = None  # a scaling study's fit approach (1, 2 or 3)
    max_runs: int | None = None  # stop after this many runs (local backend; a simulated kill)


@dataclasses.dataclass
class Context:
    """What join and report get besides the study: the log, the options, and this invocation's
    processing (runs_s: its wall seconds, None when nothing was processed; slots: runs at once)."""

    log: Callable[[str], None]
    options: Options
    runs_s: float | None = None
    slots: int = 1


@dataclasses.dataclass(frozen=True)
class Experiment:
    kind: Kind
    plan: Callable  # (study, workdir) -> list of runs
    process: Callable  # (study, run, log=, final=) -> None, module-level
    join: Callable  # (study, runs, workdir, ctx) -> dict
    report: Callable  # (study, workdir, joined, ctx) -> str | None
    start: Callable | None = None  # (study, workdir, runs) -> None, before the runs
    finished: Callable | None = None  # (study, run) -> bool: stored, nothing to process
    dry_run: Callable | None = None  # (study, runs, shard) -> str
    staged: bool = False


_REGISTRY: dict[Kind, Experiment] = {}


def register(exp: Experiment) -> Experiment:
    """Add a kind (its folder's __init__.py calls this); a kind registers once."""
    kind = Kind(exp.kind)
    if kind in _REGISTRY and _REGISTRY[kind] is not exp:
        raise ValueError(f"experiment kind {kind!r} is registered twice")
    _REGISTRY[kind] = exp
    return exp


def discover() -> list[str]:
    """Import every folder of linscale_jax.study whose __init__.py registers a kind."""
    import linscale_jax.study as pkg

    found = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not info.ispkg:
            continue
        name = f"{pkg.__name__}.{info.name}"
        init = os.path.join(pkg.__path__[0], info.name, "__init__.py")
        if os.path.exists(init) and "experiments.register(" in open(init).read():
            importlib.import_module(name)
            found.append(name)
    return found


def kind_of(study) -> Kind:
    """The preset's declared kind (study.kind)."""
    value = study.get("kind", None)
    if value is None:
        raise ValueError("the study preset declares no kind; set kind to one of "
                         f"{', '.join(Kind)} (presets build on linscale_jax.study.presets)")
    try:
        return Kind(str(value))
    except ValueError:
        raise ValueError(f"study.kind={value!r} is not a kind of experiment; use one of {', '.join(Kind)}") from None


def get(kind) -> Experiment:
    kind = Kind(kind)
    if kind not in _REGISTRY:
        discover()
    return _REGISTRY[kind]


def shard(runs: list, spec: str | None) -> list:
    """The runs with index % n == i for spec 'i/n' (all for None)."""
    i, n = parse_shard(spec)
    return [r for k, r in enumerate(runs) if k % n == i]


def parse_shard(spec: str | None) -> tuple[int, int]:
    """'i/n' -> (i, n); None or '' -> (0, 1)."""
    if not spec:
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like i/n (e.g. 0/4), got {spec!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard={spec}: need 0 <= i < n")
    return i, n


def listing(study, runs: list, spec: str | None = None) -> str:
    """The default --dry_run text: one line per run of the shard (name, N, steps, workdir)."""
    i, n = parse_shard(spec)
    mine = [(k, r) for k, r in enumerate(runs) if k % n == i]
    lines = [f"{len(mine)} run(s){'' if not spec else f' in shard {spec} of {len(runs)}'}:"]
    lines += [f"[{k:3d}] {r.name:<28} N={r.n_params:.4g} steps={r.steps}  {r.workdir}" for k, r in mine]
    return "\n".join(lines)


def say(msg: str) -> None:
    if distributed.is_primary():  # every process of a multi-host launch runs the same study
        print(msg, flush=True)


def run(study, workdir: str, options: Options = Options(), log=say) -> dict:
    """Run the preset's experiment in `workdir` (module docstring): {"kind", "runs", "processed",
    "stopped", and the join's output}. Resumable: re-running processes only what is missing."""
    exp = get(kind_of(study))
    if options.approach is not None and exp.kind is not Kind.SCALING:
        raise ValueError(f"--approach fits a scaling study's laws; a {exp.kind} preset has none")
    t0, processed, slots, every = time.time(), 0, 1, []
    sharded = parse_shard(options.shard)[1] > 1
    while True:
        runs = exp.plan(study, workdir)
        if options.dry_run:
            print((exp.dry_run or listing)(study, runs, options.shard))
            return dict(kind=exp.kind, runs=len(runs), processed=0, stopped=False, dry_run=True)
        again = {r.workdir for r in runs} & {r.workdir for r in every}  # a run is its directory
        if exp.staged and again:
            raise RuntimeError(f"{exp.kind}: a stage asks again for runs it processed: {sorted(again)}")
        every += runs
        mine = [] if options.join_only else shard(runs, options.shard)
        todo = [r for r in mine if exp.finished is None or not exp.finished(study, r)]
        if distributed.is_primary():
            os.makedirs(workdir, exist_ok=True)
            if exp.start is not None:
                exp.start(study, workdir, runs)
        if len(todo) < len(mine):
            log(f"[study] {len(mine)} run(s), {len(mine) - len(todo)} finished already")
        done = executor.execute(study, todo, exp.process, options.backend, log, options.ray_address,
                                workdir, options.max_runs)
        started = [o for o in done.outcomes.values() if o.status is not executor.Status.NOT_STARTED]
        processed, slots = processed + len(started), max(slots, done.slots)
        done.check()
        if options.max_runs is not None and done.with_status(executor.Status.NOT_STARTED):
            return dict(kind=exp.kind, runs=len(runs), processed=processed, stopped=True)
        if not exp.staged or not todo or sharded or options.join_only:
            break
    log(f"[study] {processed} run(s) processed in {fmt_time(time.time() - t0)}")
    if sharded:
        log("[study] sharded invocation: run without --shard to join the results and report")
        return dict(kind=exp.kind, runs=len(every), processed=processed, stopped=False)
    if not distributed.is_primary():  # the joined files and the report are written by process 0
        return dict(kind=exp.kind, runs=len(every), processed=processed, stopped=False)
    ctx = Context(log, options, None if options.join_only else time.time() - t0, slots)
    t_join = time.time()
    joined = exp.join(study, every, workdir, ctx)
    path = exp.report(study, workdir, joined, ctx)
    log(f"[study] runs {fmt_time(t_join - t0)} on {slots} worker(s), join + report "
        f"{fmt_time(time.time() - t_join)}, total {fmt_time(time.time() - t0)}"
        + (f"; report: {path}" if path else ""))
    return dict(joined, kind=exp.kind, runs=len(every), processed=processed, stopped=False,
                seconds=time.time() - t0)  # the whole command's seconds over a kind's own (noise: its runs')
