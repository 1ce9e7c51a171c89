"""Multi-process launch and the few collective helpers the trainer needs.

    from linscale_jax.parallel import distributed
    distributed.initialize(coordinator_address=None, num_processes=None, process_id=None)
    distributed.is_primary()            # process 0: the one that writes shared files
    distributed.barrier("name")         # every process waits here (no-op with one process)
    distributed.any_process(flag)       # True on every process when `flag` is True on any
    distributed.first_problem(text)     # the first process's non-None text, on every process
    distributed.preemption_service()    # True when JAX's preemption sync service runs

Launch: arguments win over LINSCALE_COORDINATOR_ADDRESS, LINSCALE_NUM_PROCESSES and
LINSCALE_PROCESS_ID (JAX_COORDINATOR_ADDRESS is accepted as the address too). With none of them,
`jax.distributed.initialize()` runs without arguments (JAX's cluster auto-detection) when the
environment describes several processes (a multi-host TPU VM slice, SLURM, Open MPI); a single
process initialises nothing. A TPU VM is recognised offline (TPU_* / MEGASCALE_* variables,
/dev/accel*, TPU chips on the PCI bus); its hosts come from those variables or, on GCE, from the
metadata server (2 s timeout; no answer means one host). With several CPU processes, collectives
go through gloo, its transport pinned to 127.0.0.1 when the coordinator is on loopback
(LINSCALE_GLOO_HOSTNAME / LINSCALE_GLOO_INTERFACE choose otherwise), and their gloo connections
are opened as the processes start (`connect_cpu_collectives`). jax.distributed also starts JAX's
preemption sync service. Commands and behaviour: docs/training.md, "Running on several hosts".
"""

from __future__ import annotations

import glob
import ipaddress
import os
import socket
import urllib.request

import jax
import numpy as np
from linscale_jax.parallel import peers
from linscale_jax.errors import UserError

ENV = ("LINSCALE_COORDINATOR_ADDRESS", "LINSCALE_NUM_PROCESSES", "LINSCALE_PROCESS_ID")


class LaunchError(UserError, ValueError):
    """Inconsistent launch arguments (raised before anything connects)."""


TPU_ENV = ("TPU_WORKER_HOSTNAMES", "TPU_PROCESS_ADDRESSES", "TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE",
           "MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES")
_GOOGLE_PCI_VENDOR = "0x1ae0"
_TPU_PCI_DEVICES = ("0x0027", "0x0056", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076")  # v3..7x
METADATA_TIMEOUT_S = 2.0


def tpu_chips(root: str = "/") -> int:
    """TPU chips attached to this host: /dev/accel* (v2-v4) or Google TPU devices on the PCI bus
    (v5e and later expose them through vfio). `root` is for tests."""
    accel = glob.glob(os.path.join(root, "dev", "accel*"))
    if accel:
        return len(accel)
    n = 0
    for vendor in glob.glob(os.path.join(root, "sys", "bus", "pci", "devices", "*", "vendor")):
        try:
            with open(vendor) as f, open(os.path.join(os.path.dirname(vendor), "device")) as g:
                n += f.read().strip() == _GOOGLE_PCI_VENDOR and g.read().strip() in _TPU_PCI_DEVICES
        except OSError:
            continue
    return n


def tpu_vm(root: str = "/") -> bool:
    """This host is a Cloud TPU VM (a TPU variable is set, or TPU chips are attached)."""
    return any(os.environ.get(k) for k in TPU_ENV) or tpu_chips(root) > 0


def gce_worker_endpoints() -> list[str] | None:
    """The slice's workers from the GCE metadata server (instance/attributes/worker-network-
    endpoints), None when it does not answer within METADATA_TIMEOUT_S."""
    host = os.environ.get("GCE_METADATA_IP") or "metadata.google.internal"
    req = urllib.request.Request(
        f"http://{host}/computeMetadata/v1/instance/attributes/worker-network-endpoints",
        headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(req, timeout=METADATA_TIMEOUT_S) as r:
            text = r.read().decode()
    except (OSError, ValueError):
        return None
    return [w for w in text.strip().split(",") if w]


def tpu_hosts(root: str = "/") -> int:
    """Hosts of this TPU VM's slice (all slices with Multislice); 0 when this is not a TPU VM."""
    if not tpu_vm(root):
        return 0
    env = os.environ
    slices = int(env.get("MEGASCALE_NUM_SLICES", "1") or 1)
    listed = env.get("TPU_PROCESS_ADDRESSES") or env.get("TPU_WORKER_HOSTNAMES")
    if listed is not None:
        workers = [h for h in listed.split(",") if h]
    else:
        workers = gce_worker_endpoints() or [""]
    return max(len(workers), 1) * max(slices, 1)


def _cluster_env() -> bool:
    """True when the environment describes several processes that JAX can auto-detect."""
    env = os.environ
    return (int(env.get("SLURM_NTASKS", "1") or 1) > 1
            or int(env.get("OMPI_COMM_WORLD_SIZE", "1") or 1) > 1
            or tpu_hosts() > 1)


def launch_args(coordinator_address=None, num_processes=None, process_id=None) -> dict | None:
    """The arguments of jax.distributed.initialize (None: a single process, nothing to initialise).

    Explicit arguments, else LINSCALE_* variables; {} means "let JAX auto-detect the cluster".
    """
    env = os.environ
    addr = coordinator_address or env.get(ENV[0]) or env.get("JAX_COORDINATOR_ADDRESS") or None
    n = num_processes if num_processes is not None else _int_env(ENV[1])
    pid = process_id if process_id is not None else _int_env(ENV[2])
    if addr is None and n is None and pid is None:
        return {} if _cluster_env() else None
    if n is not None and n == 1 and addr is None:
        return None
    if not _cluster_env():
        missing = [name for name, v in (("--coordinator_address", addr), ("--num_processes", n),
                                        ("--process_id", pid)) if v is None]
        if missing:
            raise LaunchError(
                f"multi-process launch needs {', '.join(missing)} (or the variables {', '.join(ENV)}) "
                "when no TPU slice or SLURM job describes the processes; e.g. --coordinator_address="
                "127.0.0.1:12355 --num_processes=2 --process_id=0 on the first process.")
    if n is not None and pid is not None and not 0 <= pid < n:
        raise LaunchError(f"--process_id={pid} must be in [0, --num_processes={n}).")
    if addr is not None and ":" not in addr:
        raise LaunchError(f"--coordinator_address={addr!r} must be HOST:PORT, e.g. 10.0.0.2:12355.")
    return {k: v for k, v in dict(coordinator_address=addr, num_processes=n, process_id=pid).items()
            if v is not None}


def _int_env(name: str) -> int | None:
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        return int(v)
    except ValueError:
        raise LaunchError(f"${name}={v!r} is not an integer.") from None


def _is_loopback(address: str | None) -> bool:
    host = (address or "").rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cpu_platform() -> bool:
    platforms = (jax.config.jax_platforms or os.environ.get("JAX_PLATFORMS", "") or "").lower()
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    try:  # no platform pinned: CPU unless an accelerator plugin is installed
        import importlib.util
        return not any(importlib.util.find_spec(m) for m in ("libtpu", "jax_cuda12_plugin",
                                                            "jax_cuda13_plugin"))
    except Exception:  # noqa: BLE001
        return True


def _setup_cpu_collectives(address: str | None) -> None:
    """gloo collectives for the CPU client, on loopback when the coordinator is local."""
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    hostname = os.environ.get("LINSCALE_GLOO_HOSTNAME") or ("127.0.0.1" if _is_loopback(address)
                                                           else None)
    interface = os.environ.get("LINSCALE_GLOO_INTERFACE") or None
    if hostname is None and interface is None:
        return  # JAX's own gloo set-up (host name resolution)

    def make_client():
        from jax._src import distributed as jd

        collectives = _jax.make_gloo_tcp_collectives(
            distributed_client=jd.global_state.client, hostname=hostname, interface=interface)
        return xla_bridge.make_cpu_client(collectives=collectives)

    xla_bridge.register_backend_factory("cpu", make_client, priority=0, fail_quietly=False)


def initialize(coordinator_address=None, num_processes=None, process_id=None,
               peer_timeout=None) -> bool:
    """Connect this process to the others (see module docstring); True when several processes run.
    `peer_timeout` (else $LINSCALE_PEER_TIMEOUT, else 60 s) bounds the wait on a peer that dies or
    never comes (linscale_jax.parallel.peers)."""
    if jax.distributed.is_initialized():
        return True
    args = launch_args(coordinator_address, num_processes, process_id)
    if args is None:
        return False
    if _cpu_platform():
        _setup_cpu_collectives(args.get("coordinator_address"))
    jax.distributed.initialize(**args, **peers.initialize_kwargs(peer_timeout))
    if _cpu_platform():
        connect_cpu_collectives()
    return True


def connect_cpu_collectives() -> None:
    """Open the gloo connections of a run's first collectives now, while the processes are in step
    (the CPU client's creation waits for every process): over all devices (a data-parallel step)
    and over one device per process (multihost_utils' gathers, `barrier`). gloo gives a connection
    30 s to find its peers, which a peer still compiling on a busy host misses; once connected, a
    collective waits for its peers (one that died is bounded by peers.py). A collective over
    another set of devices (a mesh axis across processes) still connects when it first runs."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.asarray(jax.devices()), ("all",))
    ones = jax.make_array_from_callback((jax.device_count(),), NamedSharding(mesh, PartitionSpec("all")),
                                        lambda index: np.ones(1, np.int32))
    jax.jit(lambda x: x.sum(), out_shardings=NamedSharding(mesh, PartitionSpec()))(ones).block_until_ready()
    barrier("linscale_connect")


def is_primary() -> bool:
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """All processes wait until each has reached `name` (no-op with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def any_process(flag: bool) -> bool:
    """The logical OR of `flag` over processes, the same on every process."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.asarray([bool(flag)], np.int32))))


def first_problem(problem: str | None, width: int = 400) -> str | None:
    """The first non-None `problem` in process order (its first `width` bytes), the same on every
    process: processes that each checked a share of something agree on one verdict."""
    if jax.process_count() == 1:
        return problem
    from jax.experimental import multihost_utils

    buf = np.zeros(width + 1, np.uint8)
    if problem is not None:
        text = problem.encode()[:width]
        buf[0], buf[1:1 + len(text)] = 1, np.frombuffer(text, np.uint8)
    rows = np.asarray(multihost_utils.process_allgather(buf)).reshape(-1, width + 1)
    for row in rows:
        if row[0]:
            return bytes(row[1:]).rstrip(b"\0").decode(errors="replace")
    return None


def preemption_service() -> bool:
    """True when several processes run with JAX's preemption sync service (the default of
    jax.distributed; config jax_enable_preemption_service)."""
    if jax.process_count() == 1:
        return False
    from jax._src import distributed as jax_distributed

    return getattr(jax_distributed.global_state, "preemption_sync_manager", None) is not None


def reached_preemption_sync_point(step: int) -> bool:
    """True on every process at the same step once any process got SIGTERM (call once per step,
    with the same step numbers on every process)."""
    from jax.experimental import multihost_utils

    return bool(multihost_utils.reached_preemption_sync_point(int(step)))


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (launching local processes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def define_launch_flags():
    """absl flags --coordinator_address, --num_processes, --process_id, --peer_timeout; returns
    a function that initialises from them (see `initialize`)."""
    from absl import flags

    addr = flags.DEFINE_string("coordinator_address", None,
                               "HOST:PORT of process 0's coordinator ($LINSCALE_COORDINATOR_ADDRESS).")
    n = flags.DEFINE_integer("num_processes", None, "Number of processes ($LINSCALE_NUM_PROCESSES).")
    pid = flags.DEFINE_integer("process_id", None, "This process's id in [0, num_processes) "
                               "($LINSCALE_PROCESS_ID).")
    timeout = flags.DEFINE_integer(
        "peer_timeout", None, "Seconds within which every process stops when another dies or "
        f"never registers (${peers.TIMEOUT_ENV}; default {peers.DEFAULT_TIMEOUT_S}).")
    return lambda: initialize(addr.value, n.value, pid.value, timeout.value)
