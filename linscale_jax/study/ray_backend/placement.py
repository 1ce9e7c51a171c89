"""What one run of a study asks of the Ray cluster (study.ray_backend), from the study's `cluster`
section and the run's config; its mesh must fit the devices asked for (a mesh axis of -1 takes what
is there).

    p = placement(run, study.cluster)   # Placement: hosts, devices_per_host, task options, bundle
    n = slots(ray, p)                   # how many such runs the cluster holds at once

  cpu   num_cpus=cluster.cpus_per_host, with the single-threaded XLA and malloc settings of the
        local pool (study.backends) in the task's runtime_env; the task pins itself to that many
        cores of its node (study.ray_backend.task: the same compiled programs, hence the same
        numbers, as the local pool); devices_per_host > 1 simulates that many devices
        (--xla_force_host_platform_device_count)
  gpu   num_gpus=devices_per_host
  tpu   {"TPU": chips} on one host; with tpu_topology and tpu_version a multi-host slice
        (ray.util.tpu.slice_placement_group: one bundle per host of the slice)
With hosts > 1 (or a multi-host slice) a run is a gang: a placement group with one bundle per host,
one task per bundle.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

from linscale_jax.study.backends import MALLOC_ENV, SINGLE_THREAD

REPO = str(Path(__file__).resolve().parents[3])  # the folder holding linscale_jax: on the workers' PYTHONPATH
ACCELERATORS = ("cpu", "gpu", "tpu")


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
            flags += f" {SINGLE_THREAD}"
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


def slots(ray, p: Placement) -> int:
    """How many runs of placement `p` the cluster holds at once."""
    total = ray.cluster_resources()
    want = {k: v * p.hosts for k, v in p.bundle.items() if v}
    if not want:
        return max(1, int(total.get("CPU", 1)))
    return max(1, min(int(total.get(k, 0) // v) for k, v in want.items()))
