"""The driver of a study on Ray (study.ray_backend): every run as Ray tasks, retried when lost.

    out = run(study, runs, finals, process=runner.process_run, workdir=DIR, address=None, log=print,
              eta=executor.eta_seconds)   # {"failed": {run: line}, "errors", "stopped", "signal", "slots"}

Runs are submitted longest first (their exact FLOPs), each attempt one task per host
(study.ray_backend.task) with the resources of its placement; they start as resources free up. The
driver prints one line per started and finished run with the ETA (study.backends.progress).

Failures. A run whose worker process, node or slice was lost (study.ray_backend.outcomes) is
resubmitted, at most cluster.max_retries times, and resumes from its newest checkpoint as any
resumed run does. A host that sends no heartbeat for cluster.host_timeout_s is declared lost
(study.ray_backend.gang). An attempt is resubmitted whole: when one host task ends badly (or is
declared lost) the others are cancelled, their processes ended on their nodes and the run's
train.lock released before the next attempt is submitted; the run's line and status file say
what became of each host. An error of the run itself (divergence, bad data, checkpoints trained with another
config, which runner.process_run refuses with the trainer's line) is not retried: the run is named
with its log in one line, and the other runs finish.

The driver's own node, its raylet or the control actor lost (study.ray_backend.own_node): the
study ends in one line saying what was lost and that a re-run resumes every run (exit status 1).
A control actor that answers late is waited for (a loaded machine); any error out of the driver
cancels every host task still running, so nothing of the study outlives it on an attached cluster.

Ctrl-C or SIGTERM to the driver asks every run to stop: each run's process gets SIGTERM (the
trainer saves a checkpoint; an evaluation stops between rows), queued runs are cancelled, and the
study ends with one line and exit status 0 (runner.run_study); re-running resumes. Every process
takes one stop only (linscale_jax.run.signals): later signals change nothing.
"""

from __future__ import annotations

import contextlib
import time

from linscale_jax import contract
from linscale_jax.study import files
from linscale_jax.run import signals
from linscale_jax.train.metrics import fmt_time
from linscale_jax.study.backends import progress
from linscale_jax.study.ray_backend.cluster import connect
from linscale_jax.study.ray_backend.gang import GRACE_S, host_timeout, release_lock, silent, tear_down
from linscale_jax.study.ray_backend.outcomes import Attempt, outcome, verdict
from linscale_jax.study.ray_backend.placement import placement, slots as slots_of
from linscale_jax.study.ray_backend.status import now, read_status, write_status
from linscale_jax.study.ray_backend.storage import check_storage
from linscale_jax.study.ray_backend.control import Control
from linscale_jax.study.ray_backend.own_node import DriverLost, OwnSide
from linscale_jax.study.ray_backend.task import host_task


STOP_GRACE_S = 120.0  # while stopping: a gang's hosts all save, the slower ones get this long


def run(study, runs: list, finals: dict, process, workdir: str, address: str | None = None,
        log=print, eta=None) -> dict:
    """Process `runs` as Ray tasks (module docstring); returns {"failed": {run: line}, "errors":
    {run: exception class}, "stopped": [runs], "signal": name or None, "slots": runs at once}."""
    ray, started_here = connect(address, log)
    try:
        return _drive(ray, study, runs, finals, process, workdir, log, eta, local=started_here)
    finally:
        if started_here:
            with contextlib.suppress(Exception):  # a lost node's Ray shuts down as far as it can
                ray.shutdown()


def _drive(ray, study, runs, finals, process, workdir, log, eta, local: bool) -> dict:
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    cluster = study.get("cluster", {})
    max_retries = int(cluster.get("max_retries", 3))
    limit = host_timeout(cluster)
    places = {r.name: placement(r, cluster) for r in runs}
    if not local:
        check_storage(ray, workdir)
    failed, errors = {}, {}
    order = sorted(runs, key=lambda r: -r.flops_exact)
    task = ray.remote(max_calls=1, max_retries=0)(host_task)
    control = ray.remote(Control).options(
        num_cpus=0, resources={"node:__internal_head__": 0.001}).remote()
    own = OwnSide(ray, control, local)
    slots = min(slots_of(ray, p) for p in places.values()) if places else 1
    p0 = next(iter(places.values()), None)
    log(f"[study] {len(order)} run(s) as Ray tasks, {p0.describe() if p0 else '-'}, up to {slots} at "
        f"once, longest first; each run's output: <run workdir>/study.log")

    def submit(run, number: int) -> Attempt:
        p = places[run.name]
        pg, strategies = None, [None]
        if p.hosts > 1:
            if p.tpu_slice:
                from ray.util import tpu

                pg = tpu.slice_placement_group(*p.tpu_slice)  # .shutdown() releases the slice
                group = pg.placement_group
            else:
                pg = group = placement_group([dict(p.bundle)] * p.hosts, strategy="SPREAD")
            strategies = [PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
                          for i in range(p.hosts)]
        write_status(run.workdir, state="queued", attempt=number, submitted=now(), ended=None,
                     error=None)
        refs = [task.options(**p.options, scheduling_strategy=s).remote(
                    study, run, finals[run.name], process, number, i, p.hosts, p.accelerator, control,
                    str(workdir)) for i, s in enumerate(strategies)]
        return Attempt(run, number, refs, pg)

    with own.guard():
        live = {r.name: submit(r, 1) for r in order}
    stopped, done, started, timed = [], set(), {}, []
    t0 = time.time()

    def on_stop(_signum):  # the first signal (linscale_jax.run.signals; main thread only)
        control.request_stop.remote()
        for name, a in live.items():  # queued runs: cancelled; running ones stop after a save
            if name not in started:
                for ref in a.refs:
                    ray.cancel(ref)

    def line(name: str, what: str) -> None:
        if stop.name:
            return  # stopping: one line at the end (runner.run_study)
        finished = done | set(failed) | set(stopped)
        log(f"[study] {name} {what}{progress(order, started, finished, timed, eta, slots, t0)}")

    def settle(a: Attempt, teardown: str) -> None:
        name, run = a.run.name, a.run
        del live[name]
        control.forget.remote(name, a.number)
        freed = release_lock(run.workdir, a)
        if hasattr(a.pg, "shutdown"):
            a.pg.shutdown()
        elif a.pg is not None:
            remove_placement_group(a.pg)
        outcomes = [a.outcomes[i] for i in sorted(a.outcomes)]
        state, msg = verdict(outcomes, bool(stop.name))
        if state != "done":  # the line says what the driver did about the other hosts
            msg = "; ".join(x for x in (msg, teardown, freed) if x)
        host0 = a.outcomes.get(0, {})
        entry = dict(attempt=a.number, outcome=state, message=msg or None, ended=now(),
                     node=host0.get("node") or read_status(run.workdir).get("node"))
        history = read_status(run.workdir).get("history", []) + [entry]
        if state == "done":
            done.add(name)
            timed.append((run.flops_exact, time.time() - started.get(name, (t0,))[0]))
            write_status(run.workdir, state="done", ended=entry["ended"], history=history)
            line(name, f"done in {fmt_time(time.time() - started.get(name, (t0,))[0])}"
                       f"{f' (attempt {a.number})' if a.number > 1 else ''}")
        elif state == "stopped":
            if name in started:  # a queued run that was cancelled is not "stopped"
                stopped.append(name)
            write_status(run.workdir, state="stopped", ended=entry["ended"], history=history)
        elif state == "lost" and a.number <= max_retries and not stop.name:
            write_status(run.workdir, state="retrying", ended=entry["ended"], error=msg, history=history)
            where = host0.get("ip") or read_status(run.workdir).get("ip") or "its node"
            log(f"[study] {name} lost on {where} (attempt {a.number}: {msg}); "
                f"retry {a.number}/{max_retries} resumes from its newest checkpoint")
            started.pop(name, None)
            live[name] = submit(run, a.number + 1)
        else:
            if state == "lost":
                msg = (f"lost {a.number} time(s), the last: {msg}" if not stop.name else
                       f"lost while stopping: {msg}")
            log_file = contract.workdir_file(run.workdir, files.STUDY_LOG)
            failed[name] = msg if "(log:" in msg else f"{msg} (log: {log_file})"
            errors[name] = next((o["error"] for o in outcomes if o.get("error")), None)
            write_status(run.workdir, state="failed", ended=entry["ended"], error=failed[name],
                         history=history)
            line(name, f"FAILED: {failed[name]}")

    def take(events) -> None:
        for kind, name, number, ip, t in events:
            a = live.get(name)
            if kind == "start" and a is not None and a.number == number:
                started[name] = (t, ip)
                if not stop.name:
                    log(f"[study] {ip}: {name} started (N={a.run.n_params:.3g}, {a.run.steps} "
                        f"steps{f', attempt {number}' if number > 1 else ''}) | elapsed "
                        f"{fmt_time(time.time() - t0)}")

    with signals.deferred(on_stop) as stop, lost_marks(live), ended_whole(ray, live, control, own):
        drain, asked = control.drain.remote(), time.time()  # answered when the actor can
        while live:
            own.check()
            pending = [ref for a in live.values() for i, ref in enumerate(a.refs) if i not in a.resolved]
            with own.guard():
                ready, _ = ray.wait(pending + [drain], num_returns=len(pending) + 1, timeout=1.0)
                fresh = drain in ready
                if fresh:
                    events, beats = ray.get(drain)
                    drain, asked = control.drain.remote(), time.time()
            if fresh:
                take(events)
            else:
                own.waited(time.time() - asked, log)
            ready = set(ready)
            for a in list(live.values()):
                for i, ref in enumerate(a.refs):
                    if i not in a.resolved and ref in ready:
                        a.resolved.add(i)
                        a.outcomes.setdefault(i, outcome(ray, ref))
                if fresh:  # ages measured by the actor just now: a late actor delays, never kills
                    a.beats = {k[2]: v for k, v in beats.items() if k[:2] == (a.run.name, a.number)}
                    silent(a, a.beats, limit)
                teardown = ""
                if any(o.get("state") != "done" for o in a.outcomes.values()):
                    bad = next(o for o in a.outcomes.values() if o.get("state") != "done")
                    with own.guard():  # a host ended badly: the others are ended too, then resubmitted
                        teardown = tear_down(ray, a, a.beats, bad.get("message") or bad.get("state"),
                                             grace_s=STOP_GRACE_S if stop.name else GRACE_S)
                if len(a.resolved) == len(a.refs):
                    with own.guard():  # a retry's submission
                        settle(a, teardown)
    return {"failed": failed, "errors": errors, "stopped": stopped, "signal": stop.name, "slots": slots}


@contextlib.contextmanager
def ended_whole(ray, live: dict, control, own: OwnSide):
    """On any error out of the driver's loop: every host task still running is cancelled (force),
    so no run of a study that ended keeps its worker, its cores or its train.lock; the control
    actor goes too. Not when the local Ray's own raylet died: its shutdown ends everything."""
    try:
        yield
    except BaseException:
        if own.raylet is not None and own.raylet.poll() is not None:
            raise
        for a in live.values():
            for i, ref in enumerate(a.refs):
                if i not in a.resolved:
                    with contextlib.suppress(Exception):  # a lost node's Ray answers nothing
                        ray.cancel(ref, force=True)
        with contextlib.suppress(Exception):
            ray.kill(control)
        raise


@contextlib.contextmanager
def lost_marks(live: dict):
    """On DriverLost: every run still under way gets state "lost" in its status file (the re-run
    resumes it), then the error goes on."""
    try:
        yield
    except DriverLost as e:
        for a in live.values():
            with contextlib.suppress(OSError):
                write_status(a.run.workdir, state="lost", ended=now(), error=str(e))
        raise
