"""One host of one run, inside its Ray worker process (study.ray_backend).

    task = ray.remote(max_calls=1, max_retries=0)(host_task)
    task.options(**placement.options).remote(study, run, final, process, attempt, host, hosts,
                                             accelerator, control, DIR)

host_task runs `process` (runner.process_run: train or resume, evaluate, cooldowns) for one host of
one attempt, with the run's output in its study.log (host 0) or study.host<i>.log, and returns how
it ended: done, stopped, failed (the run's own error, in one line with its log) or lost (a gang's
peer died). It checks that it sees the study directory (the status file the driver wrote), pins a
CPU run to as many cores as it reserved, removes the train.lock of a lost previous attempt, beats
every second from a thread (the driver's deadline on a silent host: study.ray_backend.gang), and
turns the driver's stop request, which the beat's answer carries, into SIGTERM to itself (the
trainer saves a checkpoint).
A gang's hosts join one jax.distributed job: host 0 publishes the JAX coordinator's address (its
node's address and a port free there) in the driver's mailbox (study.ray_backend.control) and each
host passes it, the number of hosts and its own index to linscale_jax.parallel.distributed.initialize;
on TPU the slice's own environment describes the job (JAX's auto-detection).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import sys
import threading
import time
import traceback

from linscale_jax import contract
from linscale_jax.study import files
from linscale_jax.errors import Stopped
from linscale_jax.run import signals
from linscale_jax.study.backends import error_class, redirect
from linscale_jax.study.ray_backend.cluster import TEMP_DIR
from linscale_jax.study.ray_backend.control import BEAT_S, CONTROL_PATIENCE_S
from linscale_jax.study.ray_backend.gang import proc_start
from linscale_jax.study.ray_backend.status import now, read_status, write_status

COORDINATOR_WAIT_S = 300.0


def _ask(ref, timeout: float = CONTROL_PATIENCE_S):
    """An actor call's result inside a task. Not ray.get: a task blocked in ray.get lends its CPUs
    to the next queued task, and runs would overlap. A late answer (a loaded head node) is waited
    for; a lost actor raises at once."""
    return ref.future().result(timeout=timeout)


def _heartbeat(control, key: tuple, info: dict, interval: float = BEAT_S) -> None:
    """Thread in a run's process: a beat every `interval` seconds (study.ray_backend.gang: the
    driver's deadline), and SIGTERM to the process once the driver asks the runs to stop (the
    beats go on while the run saves). It ends only with the control actor (the driver is gone:
    Ray ends this task with it)."""
    signalled = False
    while True:
        try:
            stop = _ask(control.beat.remote(key, info))
        except Exception:  # noqa: BLE001 - the driver is gone; Ray ends this task with it
            return
        if stop and not signalled:
            os.kill(os.getpid(), signal.SIGTERM)
            signalled = True
        time.sleep(interval)


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _coordinator(control, key: str, host: int, ip: str) -> str:
    """Host 0 publishes ip:port for the JAX coordinator; the others wait for it."""
    if host == 0:
        addr = f"{ip}:{_free_port(ip)}"
        _ask(control.put.remote(key, addr))
        return addr
    deadline = time.time() + COORDINATOR_WAIT_S
    while time.time() < deadline:
        addr = _ask(control.get.remote(key))
        if addr:
            return addr
        time.sleep(0.2)
    raise TimeoutError(f"host 0 of {key} published no coordinator address in {COORDINATOR_WAIT_S:.0f}s")


def _pin_cores(n: int) -> list[int]:
    """Pin this process to `n` cores no other run of this node holds (a lock file per core under
    TEMP_DIR, held to the process's end), as the local pool pins its workers: XLA:CPU compiles for
    the cores it sees (its loop partitioning, hence the sums' order), so a run sees as many as
    it reserved and computes what it computes in the local pool. Cores already held are shared."""
    import fcntl

    cores = sorted(os.sched_getaffinity(0))
    mine = []
    for c in cores:
        if len(mine) == n:
            break
        fd = os.open(os.path.join(TEMP_DIR, f"study-core-{c}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            mine.append(c)  # the descriptor stays open: the lock lasts as long as this process
        except BlockingIOError:
            os.close(fd)
    mine += [c for c in cores if c not in mine][:n - len(mine)]
    os.sched_setaffinity(0, mine)
    return mine


def _clear_lost_lock(run_workdir, attempt: int) -> str | None:
    """Remove the train.lock of the run's previous attempt (its host and pid, from the status
    file): the driver saw that attempt lost, so its holder is dead even where run.lock could only
    tell by the heartbeat's age. Returns the line saying so, None when there was nothing to do."""
    from etils import epath

    from linscale_jax.run import lock

    prev, holder = read_status(run_workdir), lock.read_holder(run_workdir)  # host, pid: the last start
    if not holder or attempt <= 1 or (prev.get("host"), prev.get("pid")) == (socket.gethostname(), os.getpid()):
        return None
    if (holder.get("host"), holder.get("pid")) != (prev.get("host"), prev.get("pid")):
        return None
    try:
        (epath.Path(run_workdir) / contract.LOCK).unlink()
    except OSError:
        return None
    return (f"Removed the lock of the lost attempt {attempt - 1} (pid {holder.get('pid')} on "
            f"{holder.get('host')}).")


def host_task(study, run, final: bool, process, attempt: int, host: int, hosts: int, accelerator: str,
              control, study_dir: str) -> dict:
    """One host of one run (the Ray task; the driver wraps it with max_calls=1): the run's output
    goes to its study.log (host 0) or study.host<i>.log. Returns {"state": done | stopped | failed |
    lost, "message", "node", "ip", "host", "pid"}."""
    import ray
    from etils import epath

    ip, pid = ray.util.get_node_ip_address(), os.getpid()
    me = dict(node=ray.get_runtime_context().get_node_id(), ip=ip, host=socket.gethostname(), pid=pid)
    beat = dict(me, pid_start=proc_start(pid))  # what the driver needs to end this process
    name = files.STUDY_LOG if host == 0 else f"study.host{host}.log"
    log_path = contract.workdir_file(run.workdir, name)
    if int(read_status(run.workdir).get("attempt", 0)) != attempt:  # the driver wrote it: DIR is not shared
        return dict(me, state="failed", message=f"node {ip} cannot see the study directory {study_dir}; "
                    "put it on storage every node mounts at the same path, or on gs://")
    key = (run.name, attempt, host)
    if _ask(control.beat.remote(key, beat)):
        return dict(me, state="stopped", message="stopped before it started")
    signals.install()  # this worker process is the run's command: one stop, however many signals
    if accelerator == "cpu":
        os.makedirs(TEMP_DIR, exist_ok=True)
        _pin_cores(max(1, math.ceil(float(study.get("cluster", {}).get("cpus_per_host", 1)))))
    threading.Thread(target=_heartbeat, args=(control, key, beat), daemon=True, name="study-beat").start()
    epath.Path(run.workdir).mkdir(parents=True, exist_ok=True)
    cleared = _clear_lost_lock(run.workdir, attempt) if host == 0 else None
    if host == 0:
        write_status(run.workdir, state="running", attempt=attempt, started=now(), **me)
        control.event.remote(("start", run.name, attempt, ip, time.time()))
    saved = os.dup(1), os.dup(2)
    with signals.running() as early, open(log_path, "a", buffering=1) as f:
        if early:
            return dict(me, state="stopped", message=early)
        redirect(f.fileno())  # file descriptors: progress bars, absl and XLA too
        try:
            print(f"[study] {run.name}: attempt {attempt}, host {host + 1}/{hosts} on {ip} "
                  f"(pid {pid}, {now()})", flush=True)
            if cleared:
                print(cleared, flush=True)
            if hosts > 1:
                from linscale_jax.parallel import distributed

                if accelerator == "tpu":  # the slice's environment describes the job
                    distributed.initialize()
                else:
                    addr = _coordinator(control, f"{run.name}/{attempt}", host, ip)
                    distributed.initialize(addr, hosts, host)
            process(study, run, log=lambda m: print(m, flush=True), final=final)
            return dict(me, state="done")
        except (Stopped, KeyboardInterrupt) as e:  # the trainer saved, or a stop between eval rows
            return dict(me, state="stopped", message=str(e) or "interrupted")
        except Exception as e:  # noqa: BLE001 - the run's own error: reported, never retried
            from linscale_jax.parallel import peers
            from linscale_jax.run import command

            if signals.raised():  # a library's failure around the stop's interruption
                return dict(me, state="stopped", message=signals.received())
            with contextlib.suppress(OSError):  # the log's disk may be the full one
                traceback.print_exc()
            lost = hosts > 1 and peers.peer_failure(e)  # another host of the gang died
            return dict(me, state="lost" if lost else "failed", error=error_class(e),
                        message=f"{command.one_line(e, run.workdir, 'study')} (log: {log_path})")
        finally:
            sys.stdout.flush()
            redirect(*saved)
