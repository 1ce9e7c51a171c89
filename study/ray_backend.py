"""A study's runs as Ray tasks, on this machine or on a cluster (python -m study --backend=ray).

    out = run(study, runs, finals, process=runner.process_run, workdir=DIR, address=None, log=print,
              eta=runner.eta_seconds)        # {"failed": {run: line}, "stopped": [...], "signal", "slots"}

The [cluster] extra (Ray). Without an address ($RAY_ADDRESS or --ray_address) a local Ray is started
on 127.0.0.1 only (every Ray process of it listens and connects on loopback) and shut down at the
end; with one, the study attaches to that cluster and leaves it running. DIR must be the same
directory on every node (a mounted file system, or gs://): it is checked at submission on every
node alive then, and again by every run when it starts.

One run is one unit of work, `runner.process_run` (train or resume, evaluate, cooldowns), in a
fresh worker process (max_calls=1: libtpu and jax.distributed start once per process). Runs are
submitted longest first. What a run asks for comes from the study's `cluster` section and the
run's config (`placement`):
  cpu   num_cpus=cluster.cpus_per_host, with the single-threaded XLA and malloc settings of the
        local pool (study.workers) in the task's runtime_env, pinned to that many cores of its node
        (_pin_cores: the same compiled programs, hence the same numbers, as the local pool);
        devices_per_host > 1 simulates that many devices (--xla_force_host_platform_device_count)
  gpu   num_gpus=devices_per_host
  tpu   {"TPU": chips} on one host; with tpu_topology and tpu_version a multi-host slice
        (ray.util.tpu.slice_placement_group: one bundle per host of the slice)
With hosts > 1 (or a multi-host slice) a run is a gang: a placement group with one bundle per
host, one task per bundle, and every host task joins one jax.distributed job. Host 0 publishes
the JAX coordinator's address (its node's address and a port free there) and each host task
passes it, the number of hosts and its own index to linscale_jax.dist.distributed.initialize; on
TPU the slice's own environment describes the job (JAX's auto-detection).

Failures. A run whose worker process, node or slice was lost (WorkerCrashedError, NodeDiedError,
Ray's out-of-memory kill, a SIGTERM the driver did not send: a preemption) is resubmitted, at most
cluster.max_retries times, and resumes from its newest checkpoint as any resumed run does. A gang
is resubmitted whole: when one host task ends badly the others are cancelled first. The
train.lock of the lost attempt (its host and pid are in the run's status file) is removed by the
next attempt, so a lock whose holder died with its node does not wait out run.lock's stale time.
An error of the run itself (divergence, bad data, checkpoints trained with another config, which
runner.process_run refuses with the trainer's line) is not retried: the run is named with its log
in one line, and the other runs finish.
DIR/runs/<run>/status.json keeps the run's state (queued, running, retrying, done, failed,
stopped), attempt, node, host, pid, times and every attempt's outcome.

Ctrl-C or SIGTERM to the driver asks every run to stop: each run's process gets SIGTERM (the
trainer saves a checkpoint; an evaluation stops between rows), queued runs are cancelled, and the
study ends with one line and exit status 0 (runner.run_study); re-running resumes. Every process
takes one stop only (linscale_jax.run.signals): later signals change nothing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
import warnings
from pathlib import Path

from linscale_jax import contract
from linscale_jax.errors import Stopped, UserError
from linscale_jax.train.metrics import fmt_time
from linscale_jax.run import signals
from study.workers import _SINGLE_THREAD, MALLOC_ENV, _redirect

REPO = str(Path(__file__).resolve().parents[1])  # on the workers' PYTHONPATH
# A local Ray on loopback: no token auth (nothing outside this machine can reach it), no usage
# reports, and 127.0.0.1 as the node address (Ray picks the interface address otherwise; the
# setting is read when ray is imported).
LOCAL_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
             "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
TEMP_DIR = "/tmp/ray"  # short: Unix socket paths live under it
COORDINATOR_WAIT_S = 300.0
ACCELERATORS = ("cpu", "gpu", "tpu")
# Ray errors that mean the run's process, node or slice was lost (retried); RayTaskError (the run's
# own exception outside its handler), RuntimeEnvSetupError and TaskUnschedulableError are not.
LOST = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError",
        "ObjectLostError", "OwnerDiedError", "ObjectReconstructionFailedError", "RaySystemError",
        "TaskPlacementGroupRemoved", "ActorDiedError")


class ClusterError(UserError, RuntimeError):
    """The cluster cannot run the study as asked (no Ray, storage a node cannot see, a placement
    no node offers)."""


# ---- placement: what one run asks for ---------------------------------------------------------

@dataclasses.dataclass
class Placement:
    """One run's request: `hosts` tasks, each with `options` (num_cpus / num_gpus / resources,
    runtime_env); a gang (hosts > 1) gets a placement group of `bundle` per host, or a TPU slice's."""
    accelerator: str
    hosts: int
    devices_per_host: int
    options: dict
    bundle: dict
    tpu_slice: tuple[str, str] | None = None  # (topology, version) of a multi-host slice

    def describe(self) -> str:
        kind = {"cpu": "simulated CPU device", "gpu": "GPU", "tpu": "TPU chip"}[self.accelerator]
        what = f"{self.devices_per_host} {kind}(s)"
        if self.accelerator == "cpu":
            what += f", {self.options['num_cpus']:g} CPU(s)"
        return what + " per host" + (f", {self.hosts} hosts (a gang)" if self.hosts > 1 else "")


def _tpu_slice_hosts(topology: str, version: str) -> tuple[int, int]:
    """(hosts, chips per host) of a TPU slice, from Ray's TPU tables."""
    from ray._private.accelerators import tpu

    chips = tpu.get_num_chips_from_topology(topology)
    per_host = tpu.get_chips_per_host(topology, version)
    return max(1, chips // per_host), per_host


def placement(run, cluster) -> Placement:
    """The resources of `run` (plan.Run) from the study's cluster section and the run's config:
    its mesh must fit the devices asked for (a mesh axis of -1 takes what is there)."""
    acc = str(cluster.get("accelerator", "cpu")).lower()
    if acc not in ACCELERATORS:
        raise ValueError(f"study.cluster.accelerator={acc!r}; use one of {ACCELERATORS}")
    hosts, per_host = int(cluster.get("hosts", 1)), int(cluster.get("devices_per_host", 0))
    cpus = float(cluster.get("cpus_per_host", 1))
    topo, version = str(cluster.get("tpu_topology", "")), str(cluster.get("tpu_version", "")).lower()
    tpu_slice = None
    if acc == "tpu" and topo:
        if not version:
            raise ValueError(f"study.cluster.tpu_topology={topo!r} needs study.cluster.tpu_version "
                             "(e.g. v6e, v5p, v4)")
        hosts, per_host = _tpu_slice_hosts(topo, version)
        tpu_slice = (topo, version) if hosts > 1 else None
    per_host = per_host or (4 if acc == "tpu" else 1)
    if hosts < 1 or per_host < 1 or cpus < 0:
        raise ValueError(f"study.cluster: hosts={hosts}, devices_per_host={per_host}, "
                         f"cpus_per_host={cpus}; give hosts >= 1, devices_per_host >= 0, cpus >= 0")
    fixed = math.prod(int(v) for v in run.config.mesh.values() if int(v) > 0)
    if (hosts * per_host) % fixed:
        raise ValueError(f"{run.name}: its mesh {dict(run.config.mesh)} needs a multiple of {fixed} "
                         f"devices; study.cluster gives {hosts} host(s) x {per_host}; change "
                         "study.cluster or --config.overrides.mesh")
    env = {"PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    if acc == "cpu":
        flags = os.environ.get("XLA_FLAGS", "")  # the driver's, as the local pool's workers inherit
        if cpus <= 1:
            flags += f" {_SINGLE_THREAD}"
        if per_host > 1:
            flags += f" --xla_force_host_platform_device_count={per_host}"
        if os.environ.get("LINSCALE_COMPILATION_CACHE"):  # the driver's choice, as the local pool's
            env["LINSCALE_COMPILATION_CACHE"] = os.environ["LINSCALE_COMPILATION_CACHE"]
        env.update({"XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu",
                    **{k: os.environ.get(k, v) for k, v in MALLOC_ENV.items()}})
        options = dict(num_cpus=cpus)
        bundle = {"CPU": cpus} if cpus else {}
    elif acc == "gpu":
        options = dict(num_cpus=cpus, num_gpus=per_host)
        bundle = {"CPU": cpus, "GPU": per_host} if cpus else {"GPU": per_host}
    else:
        options = dict(num_cpus=0, resources={"TPU": per_host})
        bundle = {"TPU": per_host}
    options["runtime_env"] = {"env_vars": env}
    return Placement(acc, hosts, per_host, options, bundle, tpu_slice)


# ---- the run's status file ---------------------------------------------------------------------

def status_path(run_workdir) -> str:
    return contract.workdir_file(run_workdir, contract.RUN_STATUS)


def read_status(run_workdir) -> dict:
    from etils import epath

    try:
        return json.loads(epath.Path(status_path(run_workdir)).read_text())
    except (OSError, ValueError):
        return {}


def write_status(run_workdir, **fields) -> dict:
    """Merge `fields` into DIR/runs/<run>/status.json (written whole: a rename on local disks)."""
    from etils import epath

    status = {**read_status(run_workdir), **fields}
    path = status_path(run_workdir)
    text = json.dumps(status, indent=1)
    if "://" in path:
        epath.Path(path).write_text(text)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return status


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


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


# ---- inside a worker: one host of one run ---------------------------------------------------------

class Control:
    """The driver's mailbox (a Ray actor on the head node): the stop request, the runs' start
    events, the gangs' coordinator addresses."""

    def __init__(self):
        self._stop, self._events, self._kv = False, [], {}

    def request_stop(self) -> None:
        self._stop = True

    def stopping(self) -> bool:
        return self._stop

    def event(self, item) -> None:
        self._events.append(item)

    def drain(self) -> list:
        out, self._events = self._events, []
        return out

    def put(self, key, value) -> None:
        self._kv[key] = value

    def get(self, key):
        return self._kv.get(key)


def _ask(ref, timeout: float = 60.0):
    """An actor call's result inside a task. Not ray.get: a task blocked in ray.get lends its CPUs
    to the next queued task, and runs would overlap."""
    return ref.future().result(timeout=timeout)


def _watch_stop(control, interval: float = 1.0) -> None:
    """Thread in a run's process: SIGTERM to the process once the driver asks the runs to stop."""
    while True:
        try:
            stop = _ask(control.stopping.remote())
        except Exception:  # noqa: BLE001 - the driver is gone; Ray ends this task with it
            return
        if stop:
            os.kill(os.getpid(), signal.SIGTERM)
            return
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


def host_task(study, run, final: bool, process, attempt: int, host: int, hosts: int, accelerator: str,
              control, study_dir: str) -> dict:
    """One host of one run (the Ray task; the driver wraps it with max_calls=1): the run's output
    goes to its study.log (host 0) or study.host<i>.log. Returns {"state": done | stopped | failed |
    lost, "message", "node", "ip", "host", "pid"}."""
    import ray
    from etils import epath

    ip, pid = ray.util.get_node_ip_address(), os.getpid()
    me = dict(node=ray.get_runtime_context().get_node_id(), ip=ip, host=socket.gethostname(), pid=pid)
    name = contract.STUDY_LOG if host == 0 else f"study.host{host}.log"
    log_path = contract.workdir_file(run.workdir, name)
    if int(read_status(run.workdir).get("attempt", 0)) != attempt:  # the driver wrote it: DIR is not shared
        return dict(me, state="failed", message=f"node {ip} cannot see the study directory {study_dir}; "
                    "put it on storage every node mounts at the same path, or on gs://")
    if _ask(control.stopping.remote()):
        return dict(me, state="stopped", message="stopped before it started")
    signals.install()  # this worker process is the run's command: one stop, however many signals
    if accelerator == "cpu":
        os.makedirs(TEMP_DIR, exist_ok=True)
        _pin_cores(max(1, math.ceil(float(study.get("cluster", {}).get("cpus_per_host", 1)))))
    threading.Thread(target=_watch_stop, args=(control,), daemon=True, name="study-stop").start()
    epath.Path(run.workdir).mkdir(parents=True, exist_ok=True)
    cleared = _clear_lost_lock(run.workdir, attempt) if host == 0 else None
    if host == 0:
        write_status(run.workdir, state="running", attempt=attempt, started=_now(), **me)
        control.event.remote(("start", run.name, attempt, ip, time.time()))
    saved = os.dup(1), os.dup(2)
    with signals.running() as early, open(log_path, "a", buffering=1) as f:
        if early:
            return dict(me, state="stopped", message=early)
        _redirect(f.fileno())  # file descriptors: progress bars, absl and XLA too
        try:
            print(f"[study] {run.name}: attempt {attempt}, host {host + 1}/{hosts} on {ip} "
                  f"(pid {pid}, {_now()})", flush=True)
            if cleared:
                print(cleared, flush=True)
            if hosts > 1:
                from linscale_jax.dist import distributed

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
            from linscale_jax.dist import peers
            from linscale_jax.run import command

            if signals.raised():  # a library's failure around the stop's interruption
                return dict(me, state="stopped", message=signals.received())
            traceback.print_exc()
            lost = hosts > 1 and peers.peer_failure(e)  # another host of the gang died
            return dict(me, state="lost" if lost else "failed",
                        message=f"{command.one_line(e, run.workdir, 'study')} (log: {log_path})")
        finally:
            sys.stdout.flush()
            _redirect(*saved)


def check_storage(ray, study_dir: str) -> None:
    """Every node alive can read a file the driver wrote under `study_dir` (ClusterError naming
    the nodes that cannot)."""
    from etils import epath
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = uuid.uuid4().hex
    path = epath.Path(contract.study_path(study_dir, f".storage-check-{token}"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token)

    def probe(p, want):
        from etils import epath as ep

        try:
            return ep.Path(p).read_text() == want
        except OSError:
            return False

    remote = ray.remote(probe)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    try:
        seen = ray.get([remote.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(str(path), token) for n in nodes], timeout=300)
    finally:
        path.unlink(missing_ok=True)
    blind = [f"{n.get('NodeManagerAddress')} ({n['NodeID'][:8]})" for n, ok in zip(nodes, seen) if not ok]
    if blind:
        raise ClusterError(
            f"the study directory {study_dir} is not visible from node(s) {', '.join(blind)} of the "
            "Ray cluster; put it on storage every node mounts at the same path (NFS, GCS FUSE) or "
            "on gs://, and pass that --workdir")


# ---- the driver ---------------------------------------------------------------------------------

def connect(address: str | None, log=print):
    """(ray, whether this call started a local cluster): attach to `address` (or $RAY_ADDRESS),
    else start a local Ray on 127.0.0.1 with this machine's cores."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        for k, v in LOCAL_ENV.items():
            os.environ.setdefault(k, v)
    try:
        import ray
    except ImportError:
        raise ClusterError("--backend=ray needs Ray: pip install '.[cluster]' (or -r requirements.txt)") from None
    if ray.is_initialized():
        return ray, False
    t0 = time.time()
    with warnings.catch_warnings():  # Ray starts its processes by fork + exec: harmless here
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
        if address is None:
            ray.init(address="local",  # a new one, even where another Ray runs on this machine
                     num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False,
                     _temp_dir=TEMP_DIR, log_to_driver=False, logging_level=logging.WARNING,
                     object_store_memory=200 * 2**20)
            what = f"started a local Ray on {ray.util.get_node_ip_address()}"
        else:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            what = f"attached to the Ray cluster at {address}"
    log(f"[study] {what} in {time.time() - t0:.1f}s ({len(ray.nodes())} node(s), "
        f"{ray.cluster_resources().get('CPU', 0):g} CPUs)")
    return ray, address is None


def _slots(ray, p: Placement) -> int:
    """How many runs of placement `p` the cluster holds at once."""
    total = ray.cluster_resources()
    want = {k: v * p.hosts for k, v in p.bundle.items() if v}
    if not want:
        return max(1, int(total.get("CPU", 1)))
    return max(1, min(int(total.get(k, 0) // v) for k, v in want.items()))


@dataclasses.dataclass
class _Attempt:
    run: object
    number: int
    refs: list
    pg: object = None
    outcomes: dict = dataclasses.field(default_factory=dict)  # host -> outcome


def _outcome(ray, ref) -> dict:
    try:
        return ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return dict(state="cancelled")
    except ray.exceptions.RayTaskError as e:  # raised outside host_task's handler
        return dict(state="failed", message=f"{type(e.cause).__name__}: {str(e.cause).strip().splitlines()[0]}"
                    if e.cause else str(e).splitlines()[0])
    except ray.exceptions.RayError as e:
        kind = type(e).__name__
        lost = kind in LOST or any(c.__name__ in LOST for c in type(e).__mro__)
        return dict(state="lost" if lost else "failed", message=f"{kind}: {str(e).strip().splitlines()[0][:200]}")


def _end_gang(ray, a: _Attempt, grace_s: float = 2.0) -> None:
    """After one host of a gang ended badly: the outcomes of hosts that end within `grace_s` (a
    peer dying at the same moment), then the rest cancelled."""
    rest = [ref for i, ref in enumerate(a.refs) if i not in a.outcomes]
    if not rest:
        return
    ready, _ = ray.wait(rest, num_returns=len(rest), timeout=grace_s)
    for i, ref in enumerate(a.refs):
        if i in a.outcomes:
            continue
        if ref in ready:
            a.outcomes[i] = _outcome(ray, ref)
        else:
            ray.cancel(ref, force=True)
            a.outcomes[i] = dict(state="cancelled")
    cancelled = [ref for ref in rest if ref not in ready]
    if cancelled:  # their processes end before the gang is resubmitted
        ray.wait(cancelled, num_returns=len(cancelled), timeout=30)


def _verdict(outcomes: list[dict], stopping: bool) -> tuple[str, str]:
    """A gang's (or a single task's) state from its hosts' outcomes, and the message."""
    states = [o.get("state") for o in outcomes]
    first = lambda s: next((o.get("message", "") for o in outcomes if o.get("state") == s), "")  # noqa: E731
    if "lost" in states:
        return "lost", first("lost")
    if "failed" in states:
        return "failed", first("failed")
    if "stopped" in states or "cancelled" in states:
        # a stop the driver did not ask for is a preemption (the node's SIGTERM): retried
        return ("stopped", first("stopped")) if stopping else ("lost", f"preempted ({first('stopped')})")
    return "done", ""


def run(study, runs: list, finals: dict, process, workdir: str, address: str | None = None,
        log=print, eta=None) -> dict:
    """Process `runs` as Ray tasks (module docstring); returns {"failed": {run: line}, "stopped":
    [runs], "signal": name or None, "slots": runs at once}."""
    ray, started_here = connect(address, log)
    try:
        return _drive(ray, study, runs, finals, process, workdir, log, eta, local=started_here)
    finally:
        if started_here:
            ray.shutdown()


def _drive(ray, study, runs, finals, process, workdir, log, eta, local: bool) -> dict:
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    cluster = study.get("cluster", {})
    max_retries = int(cluster.get("max_retries", 3))
    places = {r.name: placement(r, cluster) for r in runs}
    if not local:
        check_storage(ray, workdir)
    failed = {}
    order = sorted(runs, key=lambda r: -r.flops_exact)
    task = ray.remote(max_calls=1, max_retries=0)(host_task)
    control = ray.remote(Control).options(
        num_cpus=0, resources={"node:__internal_head__": 0.001}).remote()
    slots = min(_slots(ray, p) for p in places.values()) if places else 1
    p0 = next(iter(places.values()), None)
    log(f"[study] {len(order)} run(s) as Ray tasks, {p0.describe() if p0 else '-'}, up to {slots} at "
        f"once, longest first; each run's output: <run workdir>/study.log")

    def submit(run, number: int) -> _Attempt:
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
        write_status(run.workdir, state="queued", attempt=number, submitted=_now(), ended=None,
                     error=None)
        refs = [task.options(**p.options, scheduling_strategy=s).remote(
                    study, run, finals[run.name], process, number, i, p.hosts, p.accelerator, control,
                    str(workdir)) for i, s in enumerate(strategies)]
        return _Attempt(run, number, refs, pg)

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
        rest = ""
        if eta is not None and timed:
            left = [r.flops_exact for r in order if r.name not in started]
            running = [r.flops_exact / 2 for r in order if r.name in started and r.name in live]
            rest = f" | ETA {fmt_time(eta(timed, left + running) / slots)}"
        finished = len(done) + len(failed) + len(stopped)
        log(f"[study] {name} {what} | finished {finished}/{len(runs)} | elapsed "
            f"{fmt_time(time.time() - t0)}{rest}")

    def settle(a: _Attempt) -> None:
        name, run = a.run.name, a.run
        del live[name]
        if hasattr(a.pg, "shutdown"):
            a.pg.shutdown()
        elif a.pg is not None:
            remove_placement_group(a.pg)
        outcomes = [a.outcomes[i] for i in sorted(a.outcomes)]
        state, msg = _verdict(outcomes, bool(stop.name))
        host0 = a.outcomes.get(0, {})
        entry = dict(attempt=a.number, outcome=state, message=msg or None, ended=_now(),
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
            log_file = contract.workdir_file(run.workdir, contract.STUDY_LOG)
            failed[name] = msg if "(log:" in msg else f"{msg} (log: {log_file})"
            write_status(run.workdir, state="failed", ended=entry["ended"], error=failed[name],
                         history=history)
            line(name, f"FAILED: {failed[name]}")

    with signals.deferred(on_stop) as stop:
        while live:
            pending = [ref for a in live.values() for i, ref in enumerate(a.refs) if i not in a.outcomes]
            ready, _ = ray.wait(pending, num_returns=len(pending), timeout=1.0)
            ready = set(ready)
            for kind, name, number, ip, t in ray.get(control.drain.remote()):
                a = live.get(name)
                if kind == "start" and a is not None and a.number == number:
                    started[name] = (t, ip)
                    if not stop.name:
                        log(f"[study] {ip}: {name} started (N={a.run.n_params:.3g}, {a.run.steps} "
                            f"steps{f', attempt {number}' if number > 1 else ''}) | elapsed "
                            f"{fmt_time(time.time() - t0)}")
            for a in list(live.values()):
                for i, ref in enumerate(a.refs):
                    if i not in a.outcomes and ref in ready:
                        a.outcomes[i] = _outcome(ray, ref)
                if any(o.get("state") != "done" for o in a.outcomes.values()):
                    _end_gang(ray, a)  # a host ended badly: the others are ended too
                if len(a.outcomes) == len(a.refs):
                    settle(a)
    return {"failed": failed, "stopped": stopped, "signal": stop.name, "slots": slots}
