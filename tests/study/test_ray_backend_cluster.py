"""study.ray_backend's cluster on this machine: where its processes listen, an address where
nothing listens, and the loss of the driver's own node.

- no socket of the local cluster's processes (helpers.ray_cluster) is bound to, or connected to, an
  address outside 127.0.0.0/8, nor of a driver that attaches to it at its loopback address (a fresh
  process: Ray would take the machine's interface address for the driver otherwise);
- an address where nothing listens ends the study command in one line within 30 s naming the
  address and the two ways on;
- the driver's own node lost (its DashboardAgent killed by pid: Ray fate-shares the raylet with it)
  ends the study command in one line saying so and that a re-run resumes; the re-run resumes.
"""

from __future__ import annotations

import csv
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers.ray_cluster import ROOT, cluster, no_task_left  # noqa: F401 (fixtures)
import psutil
import ray

from linscale_jax.study import ray_backend


def _is_loopback(ip: str) -> bool:
    a = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(a, "ipv4_mapped", None)
    return a.is_loopback or bool(mapped and mapped.is_loopback)


def test_every_socket_of_the_local_cluster_is_on_loopback(cluster):  # noqa: F811
    ray.get(ray.remote(lambda: os.getpid()).options(num_cpus=1).remote())  # a worker too
    procs = psutil.Process().children(recursive=True)  # the cluster's GCS, raylets, agents, workers
    assert any("raylet" in p.name() for p in procs)
    seen = 0
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
        except psutil.Error:
            continue
        for c in conns:
            seen += 1
            assert _is_loopback(c.laddr.ip), (p.name(), c)
            assert not c.raddr or _is_loopback(c.raddr.ip), (p.name(), c)
    assert seen > 5  # GCS, raylets and workers were looked at
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    # a driver attaching to the cluster at a loopback address stays on loopback (Ray would take the
    # machine's interface address for itself otherwise): a fresh process without LOCAL_ENV
    attach = subprocess.run([sys.executable, "-c", ATTACH, cluster.address], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={k: v for k, v in os.environ.items()
                                                         if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
                                                                      "RAY_ADDRESS")})
    got = json.loads(attach.stdout.strip().splitlines()[-1]) if attach.returncode == 0 else attach.stderr[-2000:]
    assert isinstance(got, dict) and got["started"] is False and got["ip"] == "127.0.0.1", got
    assert got["ran_on"] == "127.0.0.1" and len(got["addresses"]) > 1, got
    assert all(_is_loopback(a) for a in got["addresses"]), got


# the attach path in its own process: connect() to the address given, one task, then the process's
# node address and every address its sockets use
ATTACH = """
import json, sys
import psutil
from linscale_jax.study.ray_backend.cluster import connect
ray, started = connect(sys.argv[1], log=lambda m: None)
ran_on = ray.get(ray.remote(lambda: ray.util.get_node_ip_address()).options(num_cpus=1).remote())
conns = psutil.Process().net_connections(kind="inet")
print(json.dumps(dict(started=started, ip=ray.util.get_node_ip_address(), ran_on=ran_on,
                      addresses=[c.laddr.ip for c in conns] + [c.raddr.ip for c in conns if c.raddr])))
"""


def test_an_address_where_nothing_listens_is_one_line_within_30s(tmp_path, monkeypatch):
    """--ray_address (and $RAY_ADDRESS) with nothing listening: one line naming the address and the
    two ways on, in seconds, not Ray's 20 retries of about 40 s; no Ray started, nothing trained.
    (About 15 s on 2 cores: the study command's start.)"""
    from helpers.study import env, study_cmd, write_preset

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    wd = tmp_path / "study"
    t0 = time.time()
    p = subprocess.run(study_cmd(write_preset(tmp_path), wd, "--backend=ray", f"--ray_address=127.0.0.1:{port}"),
                       cwd=ROOT, env=env(RAY_ADDRESS=None), capture_output=True, text=True, timeout=120)
    seconds = time.time() - t0
    out = [x for x in (p.stdout + p.stderr).splitlines() if x.strip()]
    print(f"\nrc {p.returncode} in {seconds:.1f}s: {out}")
    assert p.returncode == 1 and len(out) == 1 and seconds < 30, (seconds, out)
    assert out[0].startswith(f"ERROR: nothing accepts connections at the Ray address 127.0.0.1:{port} "
                             "(--ray_address: Connection refused for 5s); start a Ray cluster there "
                             f"(ray start --head --port={port} on that host) and re-run, or drop --ray_address "
                             "(and leave RAY_ADDRESS unset) to run on a local Ray that this command starts"), out
    assert not (wd / "runs").exists()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")  # the environment's address: the same line
    with pytest.raises(ray_backend.cluster.ClusterError, match=r"\(\$RAY_ADDRESS: .*or unset RAY_ADDRESS to run"):
        ray_backend.cluster.connect(None, log=lambda m: None)


@pytest.mark.slow  # a study on its own local Ray, its node lost, then re-run: about 2 min on 2 cores
def test_losing_the_drivers_node_ends_the_study_in_one_line_and_a_rerun_resumes(tmp_path):
    """`python -m linscale_jax.study --backend=ray` on the local Ray it starts: after the first
    checkpoint the node's DashboardAgent is killed by pid, Ray ends the raylet with it (and the run
    tasks and the control actor with the raylet). The study ends in one line saying the driver's node
    was lost and that a re-run resumes, exit status 1, no Ray process of it left; the same command
    then resumes the runs from their checkpoints and writes every checkpoint's row."""
    from helpers.study import env, study_cmd, write_preset

    wd = tmp_path / "study"
    cmd = study_cmd(write_preset(tmp_path), wd, "--backend=ray")
    driver = subprocess.Popen(cmd, cwd=ROOT, env=env(RAY_ADDRESS=None), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and not list(wd.glob("runs/*/checkpoints/*/checksums-p0.json")):
            time.sleep(0.2)
        ray_procs = psutil.Process(driver.pid).children(recursive=True)
        raylet = next(p for p in ray_procs if p.name() == "raylet")
        agent = next(p for p in raylet.children() if "DashboardAgent" in " ".join(p.cmdline())
                     or "dashboard/agent.py" in " ".join(p.cmdline()))
        kept = {(p.parts[-4], p.parts[-2]) for p in wd.glob("runs/*/checkpoints/*/checksums-p0.json")}
        t0 = time.time()
        os.kill(agent.pid, signal.SIGKILL)
        out, _ = driver.communicate(timeout=300)
    finally:
        driver.kill()
    seconds = time.time() - t0
    lines = [x for x in out.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("ERROR: ")]
    print(f"\nnode lost: rc {driver.returncode} {seconds:.1f}s after the kill\n" + "\n".join(lines))
    assert driver.returncode == 1 and len(errors) == 1 and lines[-1] == errors[0], lines
    assert all(x.startswith("[study] ") for x in lines[:-1]), lines  # Ray's own messages stay off
    assert "the Ray node on 127.0.0.1 that runs this study's driver was lost" in errors[0], errors
    assert "re-run the same command and every run resumes from its newest checkpoint" in errors[0]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ray_procs)  # none left
    started = [json.loads(p.read_text()) for p in wd.glob("runs/*/status.json")]
    assert {s["state"] for s in started} <= {"lost", "queued"} and "lost" in {s["state"] for s in started}
    rerun = subprocess.run(cmd, cwd=ROOT, env=env(RAY_ADDRESS=None), capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    for run, _ in kept:
        assert "Resuming from" in (wd / "runs" / run / "study.log").read_text()
    rows = list(csv.DictReader(open(wd / "table.csv")))
    assert {(r["run"], int(r["step"])) for r in rows} == {
        (f"tnl-{s}", step) for s in ("d32", "d48", "d64") for step in (1, 3, 8, 16, 24)}
