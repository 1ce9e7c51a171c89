"""A run's hosts on Ray (study.ray_backend): the heartbeat deadline, and tearing an attempt down.

    limit = host_timeout(study.cluster)        # seconds a started host may stay silent
    silent(a, beats, limit)                    # hosts past it: outcome "lost", with the reason
    line = tear_down(ray, a, why)              # every host still running ended, its process gone

Every host task beats every second through the control actor (study.ray_backend.control, from a
thread of its process: a host that is slow, compiling or blocked in a collective still beats). A
host that has beaten once and then stays silent for cluster.host_timeout_s (default 120 s; JAX's
own peer heartbeat, linscale_jax.parallel.peers, gives up after 45 s) is declared lost: its node
was partitioned, its process frozen, or it died without Ray saying so. No guess of a run's length
is involved: a live host is never declared lost however long it trains.

An attempt with one host ended badly (lost, failed, declared lost, or stopped) is torn down whole:
the hosts still running get `grace_s` to end by themselves (a peer dying at the same moment), then
ray.cancel(force=True); then a task on each one's node (no CPU asked, so it starts on a full node)
ends its process by pid if it is still there (SIGKILL: a frozen or stuck process does not answer
Ray's cancel) and waits until it has exited. Only then does the driver resubmit, so a new attempt
never meets the old one's process, its resources or its lock: the run's train.lock, when its
holder is one of those processes, is removed (the lock's own checks would wait out its 5-minute
heartbeat on another host). Every wait has a bound; a node that cannot be reached (lost, its
processes with it) is reported as such and the teardown goes on.
"""

from __future__ import annotations

import os
import signal
import time

from linscale_jax.study.ray_backend.cluster import ClusterError
from linscale_jax.study.ray_backend.control import BEAT_S
from linscale_jax.study.ray_backend.outcomes import Attempt, outcome

HOST_TIMEOUT_S = 120.0  # default of cluster.host_timeout_s
GRACE_S = 2.0  # hosts ending by themselves before the others are cancelled
EXIT_WAIT_S = 5.0  # a cancelled process's own exit, before SIGKILL
REAP_S = 90.0  # the kill tasks' answers (a new worker process on a loaded node)
END_S = 30.0  # the cancelled tasks' results after their processes are gone


def host_timeout(cluster) -> float:
    """cluster.host_timeout_s in seconds (ClusterError in one line when too short)."""
    t = float(cluster.get("host_timeout_s", HOST_TIMEOUT_S) or HOST_TIMEOUT_S)
    if t < 5 * BEAT_S:
        raise ClusterError(f"cluster.host_timeout_s={t:g} is shorter than 5 heartbeats of {BEAT_S:g} s; "
                           f"pass at least {5 * BEAT_S:g} (default {HOST_TIMEOUT_S:g})")
    return t


def proc_start(pid: int) -> str | None:
    """The start time of process `pid` (/proc/PID/stat, in clock ticks since boot): with the pid, it
    names one process (a pid is reused after its process exits); None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _running(pid: int, start: str | None) -> bool:
    """Process `pid` exists, is the one that started at `start`, and is no zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc: the pid alone
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return start is None
    return fields[0] != "Z" and (start is None or fields[19] == start)


def reap(pid: int, start: str | None, wait_s: float = EXIT_WAIT_S) -> str:
    """On a host's node: end the process `pid` that started at `start` (proc_start). Waits `wait_s`
    for it to exit (a cancel under way), then SIGKILL, then up to 10 s for it to be gone. Returns
    "ended" (by itself or by the cancel), "killed" or "still running"."""
    deadline = time.time() + wait_s
    while _running(pid, start):
        if time.time() >= deadline:
            break
        time.sleep(0.2)
    else:
        return "ended"
    try:
        os.kill(pid, signal.SIGKILL)  # ends a stopped (SIGSTOP) process too
    except ProcessLookupError:
        return "ended"
    deadline = time.time() + 10.0
    while time.time() < deadline:
        if not _running(pid, start):
            return "killed"
        time.sleep(0.1)
    return "still running"


def silent(a: Attempt, beats: dict, limit: float) -> list[int]:
    """Hosts of `a` whose last beat is older than `limit` seconds (`beats`: {host: (age, info)},
    from a fresh drain of the control actor); each gets outcome "lost" with the reason."""
    out = []
    for i, (age, info) in sorted(beats.items()):
        if i not in a.outcomes and age > limit:
            a.outcomes[i] = dict(info, state="lost", message=(
                f"host {i + 1}/{len(a.refs)} (pid {info.get('pid')} on {info.get('ip')}) sent no heartbeat "
                f"for {age:.0f}s (cluster.host_timeout_s={limit:g}): declared lost"))
            out.append(i)
    return out


def tear_down(ray, a: Attempt, beats: dict, why: str, grace_s: float = GRACE_S) -> str:
    """End every host of `a` still running (module docstring), after `grace_s` for those ending by
    themselves; `beats` {host: (age, info)} names their processes. Returns one line saying what
    became of each ("" when every host had ended)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    open_ = {i: ref for i, ref in enumerate(a.refs) if i not in a.resolved}
    if not open_:
        return ""
    ready, _ = ray.wait(list(open_.values()), num_returns=len(open_), timeout=grace_s)
    for i, ref in list(open_.items()):
        if ref in ready:
            a.resolved.add(i)
            a.outcomes.setdefault(i, outcome(ray, ref))
            del open_[i]
    if not open_:
        return ""
    for i, ref in open_.items():
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001 - its node is gone; the kill task below says so
            pass
        a.outcomes.setdefault(i, dict(state="cancelled", message=f"torn down: {why}"))
    task = ray.remote(reap)
    reapers = {}
    for i in open_:
        info = beats.get(i, (0, {}))[1]
        if info.get("node") and info.get("pid"):
            reapers[i] = task.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                info["node"], soft=False)).remote(int(info["pid"]), info.get("pid_start"))
    done, _ = ray.wait(list(reapers.values()), num_returns=len(reapers), timeout=REAP_S)
    said = []
    for i in open_:
        info = beats.get(i, (0, {}))[1]
        if i not in reapers:
            what = "cancelled before it reported"
        elif reapers[i] not in done:
            what = f"no answer from its node in {REAP_S:.0f}s"
        else:
            try:
                what = ray.get(reapers[i])
            except ray.exceptions.RayError as e:  # its node is gone, and its processes with it
                what = f"its node is unreachable ({type(e).__name__})"
        if what in ("ended", "killed"):
            a.gone.add((info.get("host"), info.get("pid")))
        said.append(f"host {i + 1}/{len(a.refs)}" + (f" (pid {info['pid']} on {info.get('ip')})"
                                                    if info.get("pid") else "") + f" {what}")
    ray.wait(list(open_.values()), num_returns=len(open_), timeout=END_S)  # Ray frees their resources
    a.resolved.update(open_)
    return "torn down: " + ", ".join(said)


def release_lock(run_workdir, a: Attempt) -> str | None:
    """Remove the run's train.lock when its holder is a process of `a` that a teardown saw end
    (a.gone); returns the line saying so, None when there was nothing to do. (A process that ended
    by itself released its lock on the way out; one that crashed left it to the next attempt's
    check, study.ray_backend.task.)"""
    from etils import epath

    from linscale_jax import contract
    from linscale_jax.run import lock

    holder = lock.read_holder(run_workdir)
    if not holder or (holder.get("host"), holder.get("pid")) not in a.gone:
        return None
    try:
        (epath.Path(run_workdir) / contract.LOCK).unlink()
    except OSError:
        return None
    return f"removed the train.lock of pid {holder.get('pid')} on {holder.get('host')}"
