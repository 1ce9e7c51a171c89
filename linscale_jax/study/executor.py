"""The one executor: a list of runs processed on one backend, with one outcome per run.

    from linscale_jax.study import executor
    done = executor.execute(study, runs, process, backend=Backend.LOCAL, workers=2, log=print)
    done.check()          # one line for a stop (Stopped) or for the failed runs (RunsFailed)
    done.outcomes["tnl-d32"]   # Outcome(status=Status.DONE, error=None, message="", seconds=81.2)

A run is any object with `name`, `workdir` (its directory: its log, study.log, lives there),
`steps`, `n_params` and `flops_exact` (the longest run first; the ETA; the start and finish lines),
and optionally `final` (passed to `process` as final=). `process(study, run, log=, final=)` is a
module-level function of the experiment (study.experiments): worker processes and Ray tasks import
it by name. Backends:

  local, 1 worker   this process, one run after another (serial)
  local, n workers  n pinned single-core processes on this machine (study.workers)
  ray               Ray tasks on a local Ray or a cluster, lost workers and nodes retried
                    (study.ray_backend)

Every backend ends the same way: a run that fails does not stop the others; its outcome carries the
exception class (error) and one line naming the run's log (message). A signal (SIGTERM, Ctrl-C)
stops every run under way after it saved; Execution.check() turns that into one stop line
(Stopped: exit status 0) and failures into one RunsFailed line (exit status 1).
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from enum import StrEnum

import numpy as np

from linscale_jax import contract
from linscale_jax.errors import Stopped, UserError
from linscale_jax.run import signals
from linscale_jax.study.backends import error_class
from linscale_jax.train.metrics import fmt_time


class Backend(StrEnum):
    """Where the runs are processed (--backend)."""

    LOCAL = "local"  # this process (study.workers = 1) or study.workers' pinned processes
    RAY = "ray"  # Ray tasks (study.ray_backend: the [cluster] extra)


class Status(StrEnum):
    """How a run ended in one execution."""

    DONE = "done"
    FAILED = "failed"  # its own error (Outcome.error); the other runs went on
    STOPPED = "stopped"  # a signal stopped it after it saved
    NOT_STARTED = "not_started"  # queued when a signal came, or after max_runs


@dataclasses.dataclass(frozen=True)
class Outcome:
    status: Status
    error: type | None = None  # the exception class of a failed run (None when not known)
    message: str = ""  # a failed run: one line with its log file; a stopped one: what it said
    seconds: float | None = None  # wall time of a run processed in this execution


class RunsFailed(UserError, RuntimeError):
    """Some runs failed; the others finished (message: each run, its error and its log)."""


@dataclasses.dataclass
class Execution:
    """The outcomes of one execute() call; `signal` is the stop's signal name (None: no stop)."""

    outcomes: dict[str, Outcome]
    signal: str | None = None
    slots: int = 1  # runs processed at once

    def with_status(self, status: Status) -> list[str]:
        return [n for n, o in self.outcomes.items() if o.status is status]

    @property
    def failed(self) -> dict[str, Outcome]:
        return {n: o for n, o in self.outcomes.items() if o.status is Status.FAILED}

    def check(self) -> None:
        """Stopped (one line, exit status 0) after a signal; RunsFailed (one line) when some run
        failed."""
        if self.signal or self.with_status(Status.STOPPED):
            saved = ", ".join(self.with_status(Status.STOPPED)) or "no run was under way"
            raise Stopped(f"[study] stopped by {self.signal or 'a signal'}: {saved} saved (checkpoints, "
                          "eval rows so far); re-run the same command to resume.")
        if self.failed:
            raise RunsFailed(f"{len(self.failed)} run(s) failed, the others finished; fix and re-run to "
                             "resume: " + "; ".join(f"{n}: {o.message}" for n, o in self.failed.items()))


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
    """'ETA 4m05s' of the runs still to process (eta_seconds)."""
    if not todo:
        return "ETA 0m00s (evaluation only)"
    if not timed:
        return "ETA after the first run"
    return f"ETA {fmt_time(eta_seconds(timed, todo))}"


def workers_for(study, n_runs: int, max_runs: int | None = None) -> int:
    """How many runs are processed at once on this machine (study.workers, at most one per run;
    one under a multi-process launch, where every run spans all hosts, and with max_runs)."""
    import jax

    n = int(study.get("workers", 1))
    if n < 1:
        raise ValueError(f"study.workers must be >= 1, got {n}")
    if n > 1 and jax.process_count() > 1:
        raise ValueError(f"study.workers={n} trains several runs in local processes; a multi-process "
                         "launch trains one run at a time over every host: set --config.workers=1")
    return 1 if max_runs is not None else max(1, min(n, n_runs))


def execute(study, runs: list, process, backend: Backend | str = Backend.LOCAL, log=print,
            ray_address: str | None = None, workdir: str | None = None,
            max_runs: int | None = None) -> Execution:
    """Process `runs` with `process` on `backend` (module docstring). max_runs (local only): stop
    after that many runs, the rest NOT_STARTED (a simulated kill)."""
    backend = Backend(backend)
    if not runs:
        return Execution({})
    finals = {r.name: bool(getattr(r, "final", False)) for r in runs}
    if backend is Backend.RAY:
        from linscale_jax.study import ray_backend

        out = ray_backend.run(study, runs, finals, process, workdir, ray_address, log, eta_seconds)
        return _from_backend(runs, out, out["slots"])
    n = workers_for(study, len(runs), max_runs)
    if n > 1:
        from linscale_jax.study import workers

        return _from_backend(runs, workers.run_parallel(study, runs, finals, n, process, log, eta_seconds), n)
    return _serial(study, runs, process, finals, log, max_runs)


def _from_backend(runs: list, out: dict, slots: int) -> Execution:
    """The pool's and Ray's result ({"failed": {run: line}, "errors": {run: class}, "stopped":
    [runs], "signal"}) as outcomes."""
    errors = out.get("errors", {})
    outcomes = {}
    for r in runs:
        if r.name in out["failed"]:
            outcomes[r.name] = Outcome(Status.FAILED, errors.get(r.name), out["failed"][r.name])
        elif r.name in out["stopped"]:
            outcomes[r.name] = Outcome(Status.STOPPED)
        elif out.get("signal"):
            outcomes[r.name] = Outcome(Status.NOT_STARTED)
        else:
            outcomes[r.name] = Outcome(Status.DONE)
    return Execution(outcomes, out.get("signal"), slots)


def _failure(e: BaseException, run) -> Outcome:
    """A run's own error as an outcome: one line naming its log, the traceback in that log."""
    from linscale_jax.run import command

    log_path = os.path.join(run.workdir, contract.STUDY_LOG)
    os.makedirs(run.workdir, exist_ok=True)
    with open(log_path, "a") as f:
        traceback.print_exception(e, file=f)
    line = command.one_line(e, run.workdir, "study") if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
    return Outcome(Status.FAILED, error_class(e), f"{line} (log: {log_path})")


def _serial(study, runs: list, process, finals: dict, log, max_runs: int | None) -> Execution:
    """One run after another in this process, each with a start line (N, steps, ETA)."""
    t0, timed, outcomes, signal = time.time(), [], {r.name: Outcome(Status.NOT_STARTED) for r in runs}, None
    for k, run in enumerate(runs):
        if max_runs is not None and k >= max_runs:
            log(f"[study] stopping after {k} run(s) (max_runs); re-run to continue")
            break
        log(f"[study] run {k + 1}/{len(runs)}: {run.name} (N={run.n_params:.3g}, {run.steps} steps) | "
            f"elapsed {fmt_time(time.time() - t0)} | {eta(timed, [r.flops_exact for r in runs[k:]])}")
        t_run = time.time()
        try:
            process(study, run, log=log, final=finals[run.name])
        except (Stopped, KeyboardInterrupt) as e:  # the trainer saved; or a stop between eval rows
            outcomes[run.name] = Outcome(Status.STOPPED, message=str(e))
            signal = signals.received() or "a signal"
            break
        except Exception as e:  # noqa: BLE001 - the run's own error: the others go on
            if signals.raised():  # a library's failure around the stop's interruption
                outcomes[run.name], signal = Outcome(Status.STOPPED), signals.received()
                break
            outcomes[run.name] = _failure(e, run)
            log(f"[study] {run.name} FAILED: {outcomes[run.name].message}")
            continue
        seconds = time.time() - t_run
        outcomes[run.name] = Outcome(Status.DONE, seconds=seconds)
        timed.append((run.flops_exact, seconds))
    return Execution(outcomes, signal, 1)
