"""Start a local Ray on loopback only, or attach to a running cluster (study.ray_backend).

    ray, started_here = connect(address, log=print)

Without an address (--ray_address or $RAY_ADDRESS) a new Ray is started on 127.0.0.1 with this
machine's cores: every Ray process of it listens and connects on loopback, with no token auth (no
one outside this machine can reach it) and no usage reports; the caller shuts it down at the end.
With one, the study attaches to that cluster and leaves it running.
"""

from __future__ import annotations

import logging
import os
import time
import warnings

from linscale_jax.errors import UserError
from linscale_jax.run.extras import MissingExtra

# A local Ray on loopback: no token auth (nothing outside this machine can reach it), no usage
# reports, and 127.0.0.1 as the node address (Ray picks the interface address otherwise; the
# setting is read when ray is imported).
LOCAL_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
             "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
TEMP_DIR = "/tmp/ray"  # short: Unix socket paths live under it


class ClusterError(UserError, RuntimeError):
    """The cluster cannot run the study as asked (no Ray, storage a node cannot see, a placement
    no node offers)."""


def connect(address: str | None, log=print):
    """(ray, whether this call started a local cluster): attach to `address` (or $RAY_ADDRESS),
    else start a local Ray on 127.0.0.1 with this machine's cores."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        for k, v in LOCAL_ENV.items():
            os.environ.setdefault(k, v)
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
                     object_store_memory=200 * 2**20)
            what = f"started a local Ray on {ray.util.get_node_ip_address()}"
        else:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            what = f"attached to the Ray cluster at {address}"
    log(f"[study] {what} in {time.time() - t0:.1f}s ({len(ray.nodes())} node(s), "
        f"{ray.cluster_resources().get('CPU', 0):g} CPUs)")
    return ray, address is None
