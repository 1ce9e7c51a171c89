"""Several runs of a study at once on one machine: N worker processes, each pinned to its own cores.

    out = run_parallel(study, runs, finals, workers=2, process=runner.process_run, log=print)

A miniature run (d32..d96, batch 8 × 128) cannot keep two CPU cores busy: XLA's intra-op threads
wait on each other in every small op. N single-core processes that each train whole runs finish the
same work in less wall time: tnl-d48 of the cpu preset took 80 s alone on 2 cores and 95 s on one
core beside another run (`bench/study_run.py --runs=tnl-d48`, under `taskset -c 0` with
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false), 1.7x the throughput. Scheduling is
longest-first (the runs' exact FLOPs), pulled from one queue, so the last runs to finish are the
small ones. Every run is still one `runner.process_run` (train or resume, evaluate), and each run's
output goes to DIR/runs/<run>/study.log; this process prints one line per started and finished run
with the study's ETA.

Stopping: Ctrl-C reaches every worker (one process group); the first SIGTERM or SIGINT to this
process is forwarded to the workers as SIGTERM. Each trainer saves a checkpoint and stops (an
evaluation stops between rows); this process waits for every worker, then returns the stopped runs
and the signal (runner.run_study turns that into one line and exit status 0); re-running the study
resumes every run. Every process takes one stop only (linscale_jax.run.signals): later signals
change nothing.
A run that fails (divergence, bad data, a config its checkpoints refuse) does not stop the others:
its error is returned (a user error as its own line, as the trainer prints it), named with its log
file, and the study stops before joining.
Only for a single-process launch: a multi-host study trains one run at a time over every host.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_lib
import signal
import time
import traceback

from linscale_jax import contract
from linscale_jax.run import signals
from linscale_jax.train.metrics import fmt_time
from linscale_jax.errors import Stopped, UserError
from linscale_jax.study.backends import MALLOC_ENV, SINGLE_THREAD, error_class, progress, redirect


def core_sets(workers: int, cores: list[int] | None = None) -> list[list[int]]:
    """Worker i's CPU cores: an even split of this process's cores (all of them when fewer cores
    than workers)."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else list(cores)
    if len(cores) < workers:
        return [cores] * workers
    return [cores[i::workers] for i in range(workers)]


def _worker(index: int, cores: list[int], study, runs: dict, finals: dict, process, todo,
            events, stopping) -> None:
    """Child process: pin to `cores`, then `process` runs named by `todo` until it yields None.
    A signal outside training stops the worker at once (linscale_jax.run.signals; the trainer's step
    loop saves a checkpoint first)."""
    os.sched_setaffinity(0, cores)
    signals.install()
    with signals.running() as early:
        if not (early or stopping.is_set()):  # the study stops while this worker starts
            _take_runs(index, runs, finals, study, process, todo, events)


def _take_runs(index, runs, finals, study, process, todo, events) -> None:
    saved = os.dup(1), os.dup(2)
    name = None
    try:
        while (name := todo.get()) is not None:
            run = runs[name]
            events.put(("start", index, name, time.time()))
            os.makedirs(run.workdir, exist_ok=True)
            log_path = os.path.join(run.workdir, contract.STUDY_LOG)
            try:
                with open(log_path, "a", buffering=1) as f:
                    redirect(f.fileno())  # file descriptors: progress bars, absl and XLA too
                    try:
                        process(study, run, log=lambda m: print(m, flush=True), final=finals[name])
                    except Stopped:
                        raise
                    except Exception:
                        traceback.print_exc()
                        raise
                    finally:
                        redirect(*saved)
                events.put(("done", index, name, time.time()))
            except Stopped:
                raise
            except Exception as e:  # noqa: BLE001 (reported to the parent with the run's log file)
                if signals.raised():  # a library's failure around the stop's interruption
                    raise signals.Interrupted(signals.received()) from None
                from linscale_jax.run import command

                # the command's own line for a user error (a refused config: the trainer's line)
                line = command.one_line(e, run.workdir, "study") if isinstance(e, UserError) else \
                    f"{type(e).__name__}: {e}"
                events.put(("failed", index, name, (f"{line} (log: {log_path})", error_class(e))))
            name = None  # a stop while waiting for the next run stops no run
    except (KeyboardInterrupt, Stopped) as e:  # the trainer saved a checkpoint (or none was under way)
        if name is not None:
            events.put(("stopped", index, name, str(e) or "interrupted"))


def _start(procs: list, ctx, cores, args) -> None:
    """Start one worker per core set into `procs`, with the XLA_FLAGS and malloc settings for them.
    They start with Ctrl-C ignored (a KeyboardInterrupt while a worker imports would print a
    traceback) until each takes its signals (signals.install); a SIGTERM forwarded meanwhile ends
    a worker before it takes a run, and one that starts later reads `stopping`."""
    saved = {k: os.environ.get(k) for k in ("XLA_FLAGS", *MALLOC_ENV)}
    os.environ["XLA_FLAGS"] = f"{saved['XLA_FLAGS'] or ''} {SINGLE_THREAD}".strip()
    for k, v in MALLOC_ENV.items():  # the spawned workers inherit the environment at start
        os.environ.setdefault(k, v)
    try:
        ctrl_c = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through exec
        try:
            for i, c in enumerate(cores):
                procs.append(ctx.Process(target=_worker, name=f"study-worker-{i}", args=(i, c, *args)))
                procs[-1].start()
        finally:
            signal.signal(signal.SIGINT, ctrl_c)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_parallel(study, runs: list, finals: dict, workers: int, process, log=print,
                 eta=None) -> dict:
    """Process `runs` (plan.Run) in `workers` pinned processes, longest first.

    `process(study, run, log=, final=)` is runner.process_run (a module-level function: the spawned
    workers import it by name); finals[run.name] says whether the run gets the final-checkpoint
    tasks. `eta(timed, todo)` (runner.eta_seconds) turns the finished runs' (FLOPs, seconds) into
    one worker's remaining seconds; it is divided by the number of workers.
    Returns {"failed": {run: error}, "errors": {run: its exception class}, "stopped": [runs a
    signal stopped], "signal": its name or None} (study.executor turns it into outcomes)."""
    order = sorted(runs, key=lambda r: -r.flops_exact)
    by_name = {r.name: r for r in runs}
    ctx = mp.get_context("spawn")  # a fresh interpreter: jax is not fork-safe
    todo, events = ctx.Queue(), ctx.Queue()
    for r in order:
        todo.put(r.name)
    for _ in range(workers):
        todo.put(None)
    cores = core_sets(workers)
    stopping = ctx.Event()  # set before the workers are signalled: a worker still starting reads it
    procs = []

    def forward(_signum):  # the first signal only (linscale_jax.run.signals)
        stopping.set()
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGTERM)

    started, timed, failed, errors, stopped, done = {}, [], {}, {}, [], set()
    t0 = time.time()
    with signals.deferred(forward) as stop:
        try:
            _start(procs, ctx, cores, (study, by_name, finals, process, todo, events, stopping))
            log(f"[study] {len(runs)} run(s) on {workers} worker processes (cores {cores}), longest "
                "first; each run's output: <run workdir>/study.log")
            while any(p.is_alive() for p in procs) or not events.empty():
                try:
                    kind, w, name, info = events.get(timeout=1.0)
                except queue_lib.Empty:
                    continue
                run = by_name[name]
                if kind == "start":
                    started[name] = info
                    log(f"[study] worker {w}: {name} started (N={run.n_params:.3g}, {run.steps} "
                        f"steps) | elapsed {fmt_time(time.time() - t0)}")
                    continue
                if kind == "done":
                    done.add(name)
                    timed.append((run.flops_exact, info - started[name]))
                    what = f"done in {fmt_time(info - started[name])}"
                elif kind == "failed":
                    (failed[name], errors[name]), what = info, f"FAILED: {info[0]}"
                else:
                    stopped.append(name)
                    what = f"stopped: {info}"
                if stop.name:  # stopping: one line at the end (runner.run_study), none per run
                    continue
                finished = set(done) | set(failed) | set(stopped)
                log(f"[study] worker {w}: {name} {what}"
                    f"{progress(runs, started, finished, timed, eta, workers, t0)}")
        finally:
            for p in procs:
                p.join()
    for p in procs:
        if p.exitcode != 0:
            for name in started:
                if name not in done and name not in failed and name not in stopped:
                    failed[name] = f"{p.name} exited with code {p.exitcode} (see the run's study.log)"
    return {"failed": failed, "errors": errors, "stopped": stopped, "signal": stop.name}
