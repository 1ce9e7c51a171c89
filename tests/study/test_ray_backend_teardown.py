"""What study.ray_backend ends, and when, on a real Ray cluster of this machine (helpers.ray_cluster).

A gang: one run over 2 host tasks x 2 simulated devices (jax.distributed over loopback), each
attempt torn down whole and resubmitted when one host goes:

- fault 1, in the first attempt that saves a checkpoint: host 1 is killed (SIGKILL) after that
  save, while host 0 stays where it is, deaf to SIGTERM and interrupts (a host blocked in a
  collective whose peer is gone, which no error ever reaches): the driver ends host 0's process
  and releases the run's lock;
- fault 2, in the next attempt: host 1 stops itself (SIGSTOP: alive to the OS and to Ray, but
  silent) as it starts, and host 0 waits for it in a collective: host 1 is declared lost after
  cluster.host_timeout_s without a heartbeat, and both hosts' processes are ended;
- the attempt after resumes from the newest checkpoint and finishes.
An attempt lost to the machine (Ray losing a worker on 2 loaded cores) comes before or between
them as one more retry; the faults follow their own order, not attempt numbers.

The test ends within its own deadline whatever the driver does: a survivor that is never torn down
fails it instead of hanging the suite.

A driver that fails (here its log raises) ends its runs' tasks on the way out: the run's process is
gone and its train.lock free, so nothing of one study (or test) holds a run or a core for the next.
The kill by pid on a host's node (study.ray_backend.gang.reap) ends a stopped process that ignores
SIGTERM, and never a process that merely reuses the pid. Only a host silent past the deadline is
declared lost, and a deadline shorter than 5 heartbeats is refused in one line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from helpers.ray_cluster import cluster, mini_study, no_task_left  # noqa: F401 (fixtures)
from ray import cloudpickle

from linscale_jax.run import lock
from linscale_jax.study import ray_backend
from linscale_jax.study.ray_backend.cluster import ClusterError
from linscale_jax.study.ray_backend.gang import host_timeout, proc_start, reap, silent
from linscale_jax.study.ray_backend.outcomes import Attempt
from linscale_jax.study.scaling import plan, runner

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # gang_faults reaches the workers
DEADLINE_S = 480  # the whole study: 3 attempts of a 12-step run, two teardowns, one 10 s deadline
HOST_TIMEOUT_S = 10


def gang_faults(study, run, log, final):
    """runner.process_run, with two attempts of a 2-host gang faulted (module docstring); each host
    of those first writes {"pid", "attempt"} to DIR/runs/<run>/fault.<F>.h<i> (F = 1, 2)."""
    from linscale_jax.parallel import distributed
    from linscale_jax.run import checkpoint as ck
    from linscale_jax.study.ray_backend.status import read_status
    from linscale_jax.study.scaling import runner as rn

    import jax

    attempt, host = int(read_status(run.workdir)["attempt"]), jax.process_index()
    done = {p.name.split(".")[1] for p in Path(run.workdir).glob("fault.*.h*")}
    stage = "2" if "1" in done and not Path(run.workdir, f"fault.2.h{host}").exists() else (
        "1" if "1" not in done else None)
    fault = Path(run.workdir, f"fault.{stage}.h{host}")
    mark = json.dumps(dict(pid=os.getpid(), attempt=attempt))
    if stage == "2":
        fault.write_text(mark)
        if host == 1:
            os.kill(os.getpid(), signal.SIGSTOP)  # silent from now on; host 0 waits in a collective
    if stage == "1":
        save = ck.save

        def save_then(mngr, *args, **kwargs):
            save(mngr, *args, **kwargs)
            mngr.wait_until_finished()
            distributed.barrier("test_saved")
            fault.write_text(mark)
            if host == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
            while True:  # host 0: stuck, as in a collective no error ever reaches
                try:
                    time.sleep(1)
                except KeyboardInterrupt:
                    pass

        ck.save = save_then
    rn.process_run(study, run, log=log, final=final)


def _end(pids) -> None:
    """SIGKILL the fault's processes that are left (the test failed; the next one starts clean)."""
    for pid in pids:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow  # trains a 2-host run three times in Ray workers
def test_a_gang_whose_host_dies_or_goes_silent_is_torn_down_whole_and_resumes(cluster, tmp_path):  # noqa: F811
    study = mini_study(archs="llama", sizes="d32", tokens=12 * 8 * 128.0, checkpoints=2)
    study.overrides.checkpoint.log_spaced = 1  # checkpoints at steps 1, 6, 12
    study.cluster.update(hosts=2, devices_per_host=2, host_timeout_s=HOST_TIMEOUT_S, max_retries=4)
    wd = str(tmp_path)
    runs = plan.build_plan(study, wd)
    name, lines, result = runs[0].name, [], []

    def drive():
        try:
            result.append(ray_backend.run(study, runs, {name: False}, gang_faults, wd, cluster.address,
                                          log=lines.append))
        except Exception as e:  # noqa: BLE001 - judged below
            result.append(e)

    t0 = time.time()
    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    driver.join(timeout=DEADLINE_S)
    seconds = time.time() - t0
    marks = {p.name: json.loads(p.read_text()) for p in Path(runs[0].workdir).glob("fault.*.h*")}
    faults = {k: m["pid"] for k, m in marks.items()}
    text = "\n".join(lines)
    print(f"\ngang with two faults: {seconds:.1f}s\n{text}")
    if driver.is_alive():
        _end(faults.values())
        pytest.fail(f"the study did not end within {DEADLINE_S}s (a host not torn down?): {faults}\n{text}")
    out = result[0]
    assert isinstance(out, dict) and out["failed"] == {}, (out, text)
    assert set(faults) == {"fault.1.h0", "fault.1.h1", "fault.2.h0", "fault.2.h1"}, marks
    left = [pid for pid in faults.values() if not _gone(pid)]
    _end(left)
    assert not left, f"processes of a torn-down attempt still running: {left}"
    status = json.loads(Path(runs[0].workdir, "status.json").read_text())
    history = status["history"]
    outcomes = [h["outcome"] for h in history]  # on a loaded machine Ray may lose a retry too
    assert status["state"] == "done" and outcomes[-1] == "done", outcomes
    assert set(outcomes[:-1]) == {"lost"} and len(outcomes) <= 5, outcomes
    one, two = marks["fault.1.h0"]["attempt"], marks["fault.2.h0"]["attempt"]
    assert marks["fault.1.h1"]["attempt"] == one < two == marks["fault.2.h1"]["attempt"] < len(history), marks
    first, second = history[one - 1]["message"], history[two - 1]["message"]
    # fault 1: Ray saw host 1 die; the driver ended host 0 (deaf to SIGTERM) and freed the lock
    host0 = f"host 1/2 (pid {faults['fault.1.h0']} on 127.0.0.1) "
    assert first.startswith("WorkerCrashedError") and re.search(rf"torn down: {re.escape(host0)}(ended|killed)",
                                                                first), first
    assert f"removed the train.lock of pid {faults['fault.1.h0']} on" in first, first
    # fault 2: host 1 stopped (SIGSTOP): silent, declared lost by the deadline, both processes ended
    assert (f"host 2/2 (pid {faults['fault.2.h1']} on 127.0.0.1) sent no heartbeat for" in second
            and f"(cluster.host_timeout_s={HOST_TIMEOUT_S}): declared lost" in second), second
    for host, pid in ((1, faults["fault.2.h0"]), (2, faults["fault.2.h1"])):
        assert re.search(rf"host {host}/2 \(pid {pid} on 127\.0\.0\.1\) (ended|killed)", second), second
    assert "\n" not in first + second
    assert "2 simulated CPU device(s), 1 CPU(s) per host, 2 hosts (a gang)" in text
    assert f"{name} lost on" in text and "retry 1/4" in text and "retry 2/4" in text, text
    log = Path(runs[0].workdir, "study.log").read_text()
    assert "host 1/2" in log and "Resuming from" in log
    assert "host 2/2" in Path(runs[0].workdir, "study.host1.log").read_text()
    assert runner.trained(runs[0])


def hold_the_lock(study, run, log, final):
    """A run's process that takes the run's train.lock, says so in DIR/runs/<run>/holding, and waits."""
    from linscale_jax.run import lock as lk

    with lk.hold(run.workdir):
        Path(run.workdir, "holding").write_text(str(os.getpid()))
        time.sleep(600)


@pytest.mark.slow  # one Ray task (no training): about 20 s on 2 loaded cores
def test_a_driver_that_fails_ends_its_runs_and_frees_their_locks(cluster, tmp_path):  # noqa: F811
    study = mini_study(sizes="d32")
    runs = plan.build_plan(study, str(tmp_path))
    holding = Path(runs[0].workdir, "holding")

    def log(line):  # the driver's own failure, once the run holds its lock
        if " started " in line:
            deadline = time.time() + 120
            while not holding.exists() and time.time() < deadline:
                time.sleep(0.2)
            raise RuntimeError("the driver failed")

    with pytest.raises(RuntimeError, match="the driver failed"):
        ray_backend.run(study, runs, {runs[0].name: False}, hold_the_lock, str(tmp_path), cluster.address,
                        log=log)
    pid = int(holding.read_text())
    deadline = time.time() + 60
    while not _gone(pid) and time.time() < deadline:
        time.sleep(0.2)
    _end([pid])
    assert _gone(pid) and lock.read_holder(runs[0].workdir)["pid"] == pid  # its lock file, its pid
    lock.check_free(runs[0].workdir)  # free: the holder is gone


def test_the_kill_by_pid_ends_a_stopped_deaf_process_and_spares_a_reused_pid():
    deaf = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                             "signal.SIG_IGN); time.sleep(600)"])
    try:
        os.kill(deaf.pid, signal.SIGSTOP)
        start = proc_start(deaf.pid)
        assert start is not None
        assert reap(deaf.pid, str(int(start) + 1), wait_s=0.2) == "ended"  # another process's pid: spared
        assert deaf.poll() is None
        assert reap(deaf.pid, start, wait_s=0.2) == "killed"
        assert deaf.wait(timeout=10) == -signal.SIGKILL
        assert reap(deaf.pid, start, wait_s=0.2) == "ended"
    finally:
        deaf.kill()


def test_only_a_host_silent_past_the_deadline_is_declared_lost_and_a_short_deadline_is_refused():
    a = Attempt(run=None, number=1, refs=["h0", "h1", "h2"], outcomes={2: dict(state="done")})
    info = dict(pid=7, ip="10.0.0.2", node="n1")
    beats = {0: (9.5, info), 1: (31.2, info), 2: (40.0, info)}  # host 2 ended: no beats expected
    assert silent(a, beats, 30.0) == [1]
    assert a.outcomes[1]["state"] == "lost" and a.outcomes[1]["message"] == (
        "host 2/3 (pid 7 on 10.0.0.2) sent no heartbeat for 31s (cluster.host_timeout_s=30): declared lost")
    assert 0 not in a.outcomes and a.outcomes[2] == dict(state="done")
    assert host_timeout({}) == 120.0 and host_timeout({"host_timeout_s": 45}) == 45.0
    with pytest.raises(ClusterError, match=r"^cluster.host_timeout_s=2 is shorter than 5 heartbeats of 1 s; "
                                           r"pass at least 5 \(default 120\)$"):
        host_timeout({"host_timeout_s": 2})
