"""Start a local Ray on loopback only, or attach to a running cluster (study.ray_backend).

    ray, started_here = connect(address, log=print)

Without an address (--ray_address or $RAY_ADDRESS) a new Ray is started on 127.0.0.1 with this
machine's cores: every Ray process of it listens and connects on loopback, with no token auth (no
one outside this machine can reach it) and no usage reports; its GCS allows a busy machine's slow
heartbeats (LOCAL_SYSTEM_CONFIG); the caller shuts it down at the end.
With one, the study attaches to that cluster and leaves it running. A loopback address
(127.0.0.0/8, localhost, ::1) stays on loopback: this driver's node address is 127.0.0.1 too, not
the machine's interface address Ray would pick. An address where nothing listens is refused
within PROBE_S seconds in one line naming it and the two ways on (start a cluster there, or drop
the address for a local one), not after Ray's 20 retries of about 40 s each.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import warnings

from linscale_jax.errors import UserError
from linscale_jax.parallel.distributed import _is_loopback
from linscale_jax.run.extras import MissingExtra

# A local Ray on loopback: no token auth (nothing outside this machine can reach it), no usage
# reports, and 127.0.0.1 as the node address (Ray picks the interface address otherwise; the
# setting is read when ray is imported).
LOCAL_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
             "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
TEMP_DIR = "/tmp/ray"  # short: Unix socket paths live under it
# The local Ray's GCS marks a node dead after health_check_failure_threshold failed checks, one
# every health_check_period_ms, each given health_check_timeout_ms. Ray's defaults (3 s, 10 s, 5)
# let an overloaded 2-core machine's raylet, which answers late, be declared dead while it works;
# these allow it 30 s an answer and 10 misses in a row. A raylet that died refuses the check at
# once, so a real loss is still seen within about 50 s (the driver sees its own node's at once:
# study.ray_backend.driver).
LOCAL_SYSTEM_CONFIG = {"health_check_initial_delay_ms": 10_000, "health_check_period_ms": 5_000,
                       "health_check_timeout_ms": 30_000, "health_check_failure_threshold": 10}
PROBE_S = 5.0  # how long an address gets to accept a connection
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray takes 127.0.0.1 as this node's address


class ClusterError(UserError, RuntimeError):
    """The cluster cannot run the study as asked (no Ray, storage a node cannot see, a placement
    no node offers)."""


def connect(address: str | None, log=print):
    """(ray, whether this call started a local cluster): attach to `address` (or $RAY_ADDRESS),
    else start a local Ray on 127.0.0.1 with this machine's cores."""
    flag = "--ray_address" if address else "$RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        for k, v in LOCAL_ENV.items():
            os.environ.setdefault(k, v)
    else:
        probe(address, flag)  # before importing Ray: seconds count
        hostport = _host_port(address)
        if hostport and _is_loopback(f"{hostport[0]}:{hostport[1]}"):  # read when ray is imported
            os.environ.setdefault(LOOPBACK_ENV, "0")
    try:
        import ray
    except ModuleNotFoundError as e:
        if e.name != "ray":
            raise
        raise MissingExtra("cluster", why="--backend=ray", instead="use --backend=local") from None
    if ray.is_initialized():
        return ray, False
    t0 = time.time()
    with warnings.catch_warnings():  # Ray starts its processes by fork + exec: harmless here
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
        if address is None:
            ray.init(address="local",  # a new one, even where another Ray runs on this machine
                     num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False,
                     _temp_dir=TEMP_DIR, log_to_driver=False, logging_level=logging.WARNING,
                     object_store_memory=200 * 2**20, _system_config=LOCAL_SYSTEM_CONFIG)
            what = f"started a local Ray on {ray.util.get_node_ip_address()}"
        else:
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            except ConnectionError as e:
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise ClusterError(f"cannot attach to the Ray cluster at {address} ({flag}): {first}; "
                                   f"{_ways_on(address, flag)}") from None
            what = f"attached to the Ray cluster at {address}"
    _quiet(ray)
    log(f"[study] {what} in {time.time() - t0:.1f}s ({len(ray.nodes())} node(s), "
        f"{ray.cluster_resources().get('CPU', 0):g} CPUs)")
    return ray, address is None


def _quiet(ray) -> None:
    """Keep Ray's error messages off the console: its driver thread prints each one the cluster
    publishes (a node marked dead, with its raylet's last state dump: tens of lines) between the
    study's lines, where the study says what happened in one line of its own (study.ray_backend.
    driver, own_node). They stay in Ray's session logs (TEMP_DIR/session_*/logs)."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if hasattr(worker, "_worker_logs_enabled"):
        worker._worker_logs_enabled = False


def _ways_on(address: str, flag: str) -> str:
    """The two ways on from an address that does not answer."""
    port = (_host_port(address) or ("", "PORT"))[1]
    drop = ("drop --ray_address (and leave RAY_ADDRESS unset)" if flag == "--ray_address" else
            "unset RAY_ADDRESS")
    return (f"start a Ray cluster there (ray start --head --port={port} on that host) and re-run, or "
            f"{drop} to run on a local Ray that this command starts")


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a Ray address (host:port, [v6]:port, ray://host:port); None for others
    ('auto', a bare host)."""
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def probe(address: str, flag: str = "--ray_address", within: float = PROBE_S) -> None:
    """ClusterError, naming the address and the two ways on, when nothing accepts a connection at
    `address` within `within` seconds (a head node starting up gets that long)."""
    hostport = _host_port(address)
    if hostport is None:
        return  # Ray resolves it (e.g. "auto": the cluster this machine last started)
    deadline, why = time.time() + within, None
    while True:
        try:
            with socket.create_connection(hostport, timeout=max(0.5, min(3.0, deadline - time.time()))):
                return
        except OSError as e:
            why = e.strerror or type(e).__name__
        if time.time() >= deadline:
            break
        time.sleep(1.0)
    raise ClusterError(f"nothing accepts connections at the Ray address {address} ({flag}: {why} for "
                       f"{within:.0f}s); {_ways_on(address, flag)}")
