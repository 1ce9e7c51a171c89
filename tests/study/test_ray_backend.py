"""study.ray_backend on a real Ray cluster of this machine, loopback only: a head node (no CPUs)
and a 2-CPU worker node started once for the module (ray.cluster_utils.Cluster, every node on
127.0.0.1), the driver attached to it. The runs are a miniature quick study (tnl at its 3 sizes with
one layer, 24 steps, val_loss at 5 checkpoints), trained once for the module by the local pool
(study.workers).

- no socket of the cluster's processes is bound to, or connected to, an address outside 127.0.0.0/8,
  nor of a driver that attaches to it at its loopback address (a fresh process: Ray would take the
  machine's interface address for the driver otherwise);
- an address where nothing listens ends the study command in one line within 30 s naming the
  address and the two ways on;
- the driver's own node lost (its DashboardAgent killed by pid: Ray fate-shares the raylet with it)
  ends the study command in one line saying so and that a re-run resumes; the re-run resumes;
- the study on Ray, compiling its own programs, one of whose runs is killed with SIGKILL after its
  first checkpoint, gives the local pool's table.csv (timing aside) and fit/fits.json: the killed
  run was retried, resumed from its checkpoint and equals the uninterrupted run;
- through experiments.run: the node running one run is removed mid-run and replaced, and the run
  completes on the new node with the local pool's numbers; an application error of another run is
  not retried, is one line naming the run and its log, and the first run still finishes; then a
  finished run whose config changed is refused with the trainer's line;
- a gang: one run over 2 host tasks x 2 simulated devices (jax.distributed over loopback); one host
  task killed after the first checkpoint makes the whole gang resubmitted, and it resumes;
- the recall and tuning kinds (shrunk presets) on Ray give the local pool's recall.csv and
  tune/cells.csv (the tuning grid staged over two rounds of Ray tasks).
The kills and the node loss are made deterministic by test-only `process` wrappers (pickled by
value to the workers) around runner.process_run.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import ipaddress
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import ml_collections
import pytest

from linscale_jax.study import ray_backend
from linscale_jax.study.ray_backend.cluster import LOCAL_ENV, TEMP_DIR

os.environ.update(LOCAL_ENV)  # read when ray is imported: loopback node addresses

import psutil  # noqa: E402
import ray  # noqa: E402
from ray import cloudpickle  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from linscale_jax import contract  # noqa: E402
from linscale_jax.run import checkpoint as ckpt  # noqa: E402
from linscale_jax.study import executor, experiments  # noqa: E402
from linscale_jax.study.scaling import plan, runner  # noqa: E402
from linscale_jax.study.ray_backend.status import read_status  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the wrappers below reach the workers
ROOT = Path(__file__).resolve().parents[2]
NODE = dict(node_ip_address="127.0.0.1", num_cpus=2, object_store_memory=80 * 2**20)
STEPS = 24
FINALS = {f"tnl-{s}": False for s in ("d32", "d48", "d64")}  # val_loss only


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args=dict(
        node_ip_address="127.0.0.1", num_cpus=0, include_dashboard=False, temp_dir=TEMP_DIR,
        object_store_memory=80 * 2**20))
    c.node = c.add_node(**NODE)
    ray.init(address=c.address, log_to_driver=False, logging_level=logging.WARNING)
    yield c
    ray.shutdown()
    c.shutdown()


def mini_study(**changes):
    """The quick preset, smaller: tnl at its 3 sizes (the fewest a law is fitted to), one layer each,
    STEPS steps, val_loss at its 5 checkpoints (steps 1, 3, 8, 16, 24), no NIAH or probe."""
    import importlib.util

    import ml_collections

    spec = importlib.util.spec_from_file_location("_quick", ROOT / "configs" / "study" / "quick.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    s = mod.get_config()
    s.update(dict(archs="tnl", sizes="d32,d48,d64", tokens=STEPS * 8 * 128.0, checkpoints=3,
                  estimators="val_loss"))
    s.overrides.model = ml_collections.ConfigDict(dict(n_layers=1))  # a third of the compile time
    s.replicates.seeds = 0
    s.overrides.optim.warmup_steps = 4
    s.fit.bootstrap = 8
    s.update(changes)
    return s


@pytest.fixture(scope="module")
def local_pool(tmp_path_factory):
    """The mini study trained and evaluated by the local pool (2 workers): (study, its directory)."""
    study, wd = mini_study(), str(tmp_path_factory.mktemp("local"))
    t0 = time.time()
    from linscale_jax.study import workers

    out = workers.run_parallel(study, plan.build_plan(study, wd), FINALS, 2, runner.process_run,
                               log=lambda m: None)
    print(f"\nlocal pool {time.time() - t0:.1f}s")
    assert out["failed"] == {} and not out["stopped"]
    return study, wd


def after_first_checkpoint(victim: str, then: str, study, run, log, final, host=0):
    """runner.process_run, except that the first attempt of run `victim` (no checkpoint yet) does
    `then` right after its first checkpoint is written: "kill" (SIGKILL to its own process, on
    host `host` of a gang) or "pause" (writes DIR/paused and sleeps: the test removes its node)."""
    from linscale_jax import contract
    from linscale_jax.parallel import distributed
    from linscale_jax.run import checkpoint as ck
    from linscale_jax.study.scaling import runner as rn

    import jax

    if run.name == victim and not ck.list_steps(run.workdir):
        save = ck.save

        def save_then(mngr, *args, **kwargs):
            save(mngr, *args, **kwargs)
            mngr.wait_until_finished()
            distributed.barrier("test_saved")
            if jax.process_index() == host:
                if then == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                Path(contract.workdir_file(run.workdir, "paused")).write_text(str(os.getpid()))
                time.sleep(600)

        ck.save = save_then
    rn.process_run(study, run, log=log, final=final)


def _rows(path, drop=("eval_seconds",)):
    return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(open(path))]


def _is_loopback(ip: str) -> bool:
    a = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(a, "ipv4_mapped", None)
    return a.is_loopback or bool(mapped and mapped.is_loopback)


def test_every_socket_of_the_local_cluster_is_on_loopback(cluster):
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


def _eval_rows(run_workdir):
    """A run's evaluation rows, timing aside."""
    rows = [json.loads(x) for x in Path(run_workdir, contract.EVAL_RESULTS).read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("seconds") and k != "workdir"} for r in rows]


@pytest.mark.slow  # trains runs in Ray workers
def test_ray_study_with_a_killed_run_equals_the_local_pool(cluster, local_pool, tmp_path, monkeypatch):
    study, local = local_pool
    wd = str(tmp_path / "ray")
    monkeypatch.setenv("LINSCALE_COMPILATION_CACHE", str(tmp_path / "xla_ray"))  # Ray compiles its own
    lines = []
    runs = plan.build_plan(study, wd)
    victim = max(runs, key=lambda r: r.flops_exact).name  # the first submitted: tnl-d64
    process = functools.partial(after_first_checkpoint, victim, "kill")
    t0 = time.time()
    out = ray_backend.run(study, runs, FINALS, process, wd, cluster.address, log=lines.append,
                          eta=executor.eta_seconds)
    print(f"\nRay with one kill {time.time() - t0:.1f}s")
    print("\n".join(lines))
    text = "\n".join(lines)
    assert out["failed"] == {} and out["stopped"] == [] and out["signal"] is None, text
    assert f"{victim} lost on 127.0.0.1 (attempt 1: WorkerCrashedError" in text, text
    assert f"{victim} done in" in text and "(attempt 2)" in text and "finished 3/3" in text
    killed = next(r for r in runs if r.name == victim)
    status = json.loads(Path(killed.workdir, "status.json").read_text())
    assert status["state"] == "done" and status["attempt"] == 2
    assert [h["outcome"] for h in status["history"]] == ["lost", "done"]
    log = Path(killed.workdir, "study.log").read_text()
    first = min(ckpt.save_steps(killed.config.checkpoint, killed.steps))
    assert f"Resuming from {killed.workdir}/checkpoints/{first} (step {first})" in log  # not restarted
    assert "Removed the lock of the lost attempt 1 (pid" in log  # not left to the lock's liveness checks
    others = [json.loads(Path(r.workdir, "status.json").read_text()) for r in runs if r is not killed]
    assert all(s["state"] == "done" and s["attempt"] == 1 for s in others)
    # joined as the scaling experiment joins: the same table (timing aside) and fits as the local pool
    ctx = experiments.Context(log=lambda m: None, options=experiments.Options())
    for d in (local, wd):
        runner.join(study, plan.build_plan(study, d), d, ctx)
    assert _rows(Path(wd, "table.csv")) == _rows(Path(local, "table.csv"))
    a, b = (json.loads(Path(d, "fit", "fits.json").read_text()) for d in (wd, local))
    assert a == b and set(a) == {"tnl"}


@pytest.mark.slow  # trains a run in Ray workers
def test_a_lost_node_moves_the_run_and_an_application_error_is_not_retried(cluster, local_pool, tmp_path,
                                                                           monkeypatch):
    study = mini_study(sizes="d32,d48")
    wd = str(tmp_path)
    runs = plan.build_plan(study, wd)
    moved, bad = runs  # tnl-d32: its node is removed mid-run; tnl-d48: held by a live trainer (this process)
    Path(bad.workdir).mkdir(parents=True)
    Path(bad.workdir, "train.lock").write_text(json.dumps(dict(
        host=os.uname().nodename, pid=os.getpid(), started="now", heartbeat=time.time())))
    process_run = runner.process_run
    scaling = experiments.get(experiments.Kind.SCALING)  # its process, paused after the first checkpoint
    monkeypatch.setitem(experiments._REGISTRY, scaling.kind, dataclasses.replace(
        scaling, process=functools.partial(after_first_checkpoint, moved.name, "pause")))
    old, lines, result = cluster.node, [], []

    def drive():
        try:
            experiments.run(study, wd, experiments.Options(backend="ray", ray_address=cluster.address),
                            log=lines.append)
        except Exception as e:  # noqa: BLE001 - judged below
            result.append(e)

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()  # Ray starts nodes from the main thread only
    deadline = time.time() + 300
    while time.time() < deadline and not (Path(moved.workdir, "paused").exists() and
                                           read_status(bad.workdir).get("state") == "failed"):
        time.sleep(0.2)
    cluster.remove_node(old)
    cluster.node = cluster.add_node(**NODE)
    driver.join(timeout=300)
    text = "\n".join(lines)
    print(f"\n{text}")
    assert result and isinstance(result[0], executor.RunsFailed), (result, text)
    msg = str(result[0])
    assert "\n" not in msg and "1 run(s) failed" in msg and f"{bad.name}: " in msg
    assert "is being trained by" in msg and f"(log: {bad.workdir}/study.log)" in msg
    status = json.loads(Path(bad.workdir, "status.json").read_text())
    assert status["state"] == "failed" and status["attempt"] == 1  # not retried
    assert f"{moved.name} lost on" in text and "retry 1/3" in text, text
    status = json.loads(Path(moved.workdir, "status.json").read_text())
    assert status["state"] == "done" and status["attempt"] == 2
    assert [h["node"] for h in status["history"]] == [old.node_id, cluster.node.node_id]
    assert "Resuming from" in Path(moved.workdir, "study.log").read_text()
    assert _eval_rows(moved.workdir) == _eval_rows(Path(local_pool[1], "runs", moved.name))
    # the finished run's config changed: refused with the trainer's line, not retried
    study.overrides.optim.lr = 1e-3
    out = ray_backend.run(study, plan.build_plan(study, wd)[:1], {moved.name: False}, process_run, wd,
                          cluster.address, log=lines.append)
    assert "config differs from the run" in out["failed"][moved.name]
    assert "optim.lr 0.003 -> 0.001" in out["failed"][moved.name]
    assert json.loads(Path(moved.workdir, "status.json").read_text())["attempt"] == 1


@pytest.mark.slow  # trains a run in Ray workers
def test_a_gang_of_two_hosts_is_resubmitted_whole_and_resumes(cluster, tmp_path):
    study = mini_study(archs="llama", sizes="d32", tokens=12 * 8 * 128.0, checkpoints=2)
    study.overrides.checkpoint.log_spaced = 1  # checkpoints at steps 1, 6, 12
    study.cluster.update(hosts=2, devices_per_host=2)
    wd = str(tmp_path)
    runs = plan.build_plan(study, wd)
    lines = []
    out = ray_backend.run(study, runs, {runs[0].name: False},
                          functools.partial(after_first_checkpoint, runs[0].name, "kill", host=1),
                          wd, cluster.address, log=lines.append)
    text = "\n".join(lines)
    assert out["failed"] == {}, text
    assert "2 simulated CPU device(s), 1 CPU(s) per host, 2 hosts (a gang)" in text
    assert "llama-d32 lost on" in text and "retry 1/3" in text, text
    status = json.loads(Path(runs[0].workdir, "status.json").read_text())
    outcomes = [h["outcome"] for h in status["history"]]  # on a loaded machine Ray may lose a retry too
    assert status["state"] == "done" and outcomes[0] == "lost" and outcomes[-1] == "done", outcomes
    assert set(outcomes[:-1]) == {"lost"} and len(outcomes) <= 4, outcomes  # retried whole, within 3 retries
    log = Path(runs[0].workdir, "study.log").read_text()
    assert "host 1/2" in log and "Resuming from" in log
    assert "host 2/2" in Path(runs[0].workdir, "study.host1.log").read_text()
    assert runner.trained(runs[0])


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


def recall_study():
    """The recall preset shrunk: llama and tnl+short_conv=4 at d16e8, 8 steps, one seed, one rate."""
    from linscale_jax.study.presets import preset

    s = preset("recall")
    s.update(dict(archs="llama,tnl+short_conv=4", shapes="d16e8", baseline_shapes="d16e8", n_pairs="2,4",
                  seq_len=32, n_keys=16, n_values=16, max_steps=8, baseline_max_steps=8, batch_size=8,
                  warmup_steps=2, eval_every=4, val_sequences=16, eval_sequences=16, seeds="0", lr="3e-3",
                  workers=2))
    return s


def tune_study():
    """The tuning preset shrunk: llama at d16l2 and d16 (one layer), two rates of one batch and β2 a
    size (a stage, then the re-tune around its best: 6 cells in 2 rounds), 24 steps a cell."""
    from linscale_jax.study.presets import preset

    s = preset("tune")
    s.update(dict(sizes="d16l2,d16", tokens=24 * 8 * 128.0, checkpoints=2))
    s.eval.val_batches = 2
    s.overrides.model = ml_collections.ConfigDict(dict(n_layers=1))
    s.tune.update(lr_points=2, max_extend=0, batches="8", beta2s="0.99", replicate_sizes="", check_archs="",
                  bootstrap=10)
    return s


@pytest.mark.slow  # trains the recall and tuning kinds in the local pool and in Ray workers
@pytest.mark.parametrize("kind", ["recall", "tune"])
def test_recall_and_tune_on_ray_give_the_local_pools_results(cluster, tmp_path, monkeypatch, kind):
    """Every kind runs on Ray through the one executor: the recall study's recall.csv and the tuning
    grid's cells.csv from Ray tasks (compiling their own programs) equal the local pool's."""
    study = recall_study() if kind == "recall" else tune_study()
    local, far = str(tmp_path / "local"), str(tmp_path / "ray")
    quiet = dict(log=lambda m: None)
    experiments.run(study, local, **quiet)  # the local pool (workers = 2)
    monkeypatch.setenv("LINSCALE_COMPILATION_CACHE", str(tmp_path / "xla_ray"))
    lines = []
    out = experiments.run(study, far, experiments.Options(backend="ray", ray_address=cluster.address),
                          log=lines.append)
    text = "\n".join(lines)
    assert "as Ray tasks" in text and out["processed"] >= 2, text
    if kind == "recall":
        assert _rows(Path(far, "recall.csv")) == _rows(Path(local, "recall.csv"))
        assert {r["arch"] for r in _rows(Path(far, "recall.csv"))} == {"llama", "tnl+short_conv=4"}
        status = json.loads(Path(far, "runs", "llama-d16e8-s0-lr0.003", "status.json").read_text())
        assert status["state"] == "done" and status["attempt"] == 1
    else:
        assert _rows(Path(far, "tune", "cells.csv")) == _rows(Path(local, "tune", "cells.csv"))
        assert len(_rows(Path(far, "tune", "cells.csv"))) == 6  # a stage, then its re-tune
