"""Multi-process training with REAL processes: 2 processes x 2 CPU devices on 127.0.0.1 over gloo.

Each process reads only the rows its devices hold (bench/data_pipeline.py: half the global batch
each, equal to the 1-process rows). Against a 1-process x 4-device reference run (same config, same global batch):
  - a 2-process run logs the same losses (up to reduction order);
  - kill -9 of both processes after a checkpoint and the same command again: the continuation is
    bit-identical to the uninterrupted 2-process run;
  - SIGTERM to one process: both save the same step (the one JAX's preemption sync service picks)
    and exit 0; that run resumed by 1 process x 4 devices (elastic resume) finishes with the
    reference losses;
  - a mesh whose 'tensor' axis spans both processes (each process holds all rows, half of the
    sequence) gives the reference losses;
  - `python -m linscale_jax.eval` on one device reads the checkpoints written by 2 processes, and eval run as 2
    processes (validation batches split between them) gives the same validation loss.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers.train import ROOT, cli_overrides, tiny_config

from linscale_jax.run import checkpoint as ckpt
from linscale_jax.parallel import distributed

pytestmark = pytest.mark.slow  # over 30 s on 2 CPU cores: deselect with -m "not slow"

STEPS = 8
WORKER = str(ROOT / "tests" / "helpers" / "multihost_worker.py")
TIMEOUT = 240


def config():
    c = tiny_config(steps=STEPS)
    c.checkpoint.update(every_steps=4)
    return c


def env(devices: int) -> dict:
    e = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
             XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}")
    e.pop("LINSCALE_COORDINATOR_ADDRESS", None)
    return e


def start(workdir, processes: int, devices: int, hook="none", extra=()):
    """Launch `processes` training processes (each with `devices` CPU devices) on one coordinator."""
    flags = [f"--config={ROOT / 'configs' / 'tiny.py'}:llama-d64", f"--workdir={workdir}",
             *cli_overrides(config()), *extra]
    port = distributed.free_port()
    procs = []
    for i in range(processes):
        launch = ([f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={processes}",
                   f"--process_id={i}"] if processes > 1 else [])
        procs.append(subprocess.Popen([sys.executable, WORKER, hook, *flags, *launch], cwd=ROOT,
                                      env=env(devices), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def finish(procs) -> list[str]:
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=TIMEOUT)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, f"process exited {p.returncode}:\n{out[-4000:]}"
    return outs


def train(workdir, processes, devices, **kw) -> list[str]:
    return finish(start(workdir, processes, devices, **kw))


def losses(workdir) -> dict[int, float]:
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ref_1x4")
    train(workdir, 1, 4)
    out = losses(workdir)
    assert sorted(out) == list(range(1, STEPS + 1))
    return out


@pytest.fixture(scope="module")
def two_by_two(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run_2x2")
    outs = train(workdir, 2, 2)
    return workdir, outs


def test_two_processes_match_one_process_four_devices(reference, two_by_two):
    workdir, outs = two_by_two
    got = losses(workdir)
    assert sorted(got) == list(range(1, STEPS + 1))
    np.testing.assert_allclose([got[s] for s in reference], list(reference.values()), rtol=2e-5)
    assert ckpt.list_steps(workdir) == [4, 8]
    # process 0 alone reports; process 1 stays quiet
    assert "Done at step 8" in outs[0] and "Done at step" not in outs[1]


def test_kill9_both_and_rerun_continues_bit_identically(two_by_two, tmp_path):
    workdir = tmp_path / "killed"
    procs = start(workdir, 2, 2, hook="sleep_after=6")
    deadline = time.time() + TIMEOUT
    try:
        while not all((workdir / f".at-6-{i}").exists() for i in range(2)):
            assert time.time() < deadline and all(p.poll() is None for p in procs), \
                "\n".join(p.communicate()[0][-3000:] for p in procs if p.poll() is not None)
            time.sleep(0.2)
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.communicate()
    assert ckpt.list_steps(workdir) == [4]
    outs = train(workdir, 2, 2)
    assert f"Resuming from {workdir / 'checkpoints' / '4'}" in outs[0]
    assert "Resuming" not in outs[1]
    assert losses(workdir) == losses(two_by_two[0])  # bit-identical


def test_sigterm_to_one_process_saves_everywhere_then_elastic_resume(reference, tmp_path):
    workdir = tmp_path / "preempted"
    outs = train(workdir, 2, 2, hook="sigterm_at=3:1")  # both must exit 0
    saved = int(re.search(r"SIGTERM: saved checkpoint at step (\d+)", outs[0]).group(1))
    assert 3 < saved < STEPS  # the step after the furthest process's step when the notice came
    assert ckpt.list_steps(workdir) == sorted({4, saved})  # (4: the regular checkpoint)
    assert sorted(losses(workdir)) == list(range(1, saved + 1))
    outs = train(workdir, 1, 4)  # resume the 2-process run with 1 process x 4 devices
    assert f"Resuming from {workdir / 'checkpoints' / str(saved)}" in outs[0]
    got = losses(workdir)
    np.testing.assert_allclose([got[s] for s in reference], list(reference.values()), rtol=2e-5)
    assert ckpt.list_steps(workdir) == sorted({4, saved, 8})


@pytest.fixture(scope="module")
def tensor_across_processes(tmp_path_factory):
    """Mesh (tensor=2, seq=2) over devices [p0d0, p0d1, p1d0, p1d1]: 'tensor' spans the two
    processes, so both hold every row of the batch, each a different half of the sequence, and
    the parameters are split across the processes."""
    workdir = tmp_path_factory.mktemp("tensor2_seq2")
    train(workdir, 2, 2, extra=("--config.mesh.data=1", "--config.mesh.tensor=2",
                                "--config.mesh.seq=2"))
    return workdir


def test_model_axes_across_processes_give_the_data_parallel_losses(reference,
                                                                   tensor_across_processes):
    got = losses(tensor_across_processes)
    np.testing.assert_allclose([got[s] for s in reference], list(reference.values()), rtol=2e-5)


def test_each_process_reads_only_its_rows_and_they_equal_the_one_process_rows():
    """bench/data_pipeline.py with real processes: 2 processes read half the rows each, equal to
    the same rows of the 1-process global batch."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "data_pipeline.py"), "--json", "--processes=1,2",
                        "--steps=3", "--seq_len=64", "--batch_size=8"], cwd=ROOT, env=env(1), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    one, two = (json.loads(x) for x in r.stdout.splitlines() if x.startswith("{"))
    assert (one["processes"], one["share_of_global_batch"], one["rows_per_process"]) == (1, 1.0, 8)
    assert (two["processes"], two["share_of_global_batch"], two["rows_per_process"]) == (2, 0.5, 4)
    assert two["rows_match_one_process"] is True


def eval_cmd(workdir, *launch):
    return [sys.executable, "-m", "linscale_jax.eval", f"--workdir={workdir}", "--steps=last", "--tasks=val_loss",
            "--val_batches=2", *launch]


def eval_rows(workdir):
    return [json.loads(x) for x in (workdir / "eval" / "results.jsonl").read_text().splitlines()]


def test_eval_on_one_device_reads_the_two_process_checkpoints(tensor_across_processes, tmp_path):
    """Then `python -m linscale_jax.eval` as 2 processes (batches split between them) gives the same figures."""
    workdir = tensor_across_processes
    r = subprocess.run(eval_cmd(workdir), cwd=ROOT, env=env(1), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = eval_rows(workdir)
    assert [(x["step"], x["task"]) for x in rows] == [(8, "val_loss")]
    assert np.isfinite(rows[0]["val_loss"]) and rows[0]["val_loss"] < 6.0

    copy = tmp_path / "copy"
    shutil.copytree(workdir / "checkpoints", copy / "checkpoints")
    port = distributed.free_port()
    procs = [subprocess.Popen(eval_cmd(copy, f"--coordinator_address=127.0.0.1:{port}",
                                       "--num_processes=2", f"--process_id={i}"),
                              cwd=ROOT, env=env(2), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    finish(procs)
    (two,) = eval_rows(copy)
    assert two["val_tokens"] == rows[0]["val_tokens"] == 2 * 4 * 32
    np.testing.assert_allclose(two["val_loss"], rows[0]["val_loss"], rtol=1e-6)


LATE_PEER = """
import sys, time
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from linscale_jax.parallel import distributed

port, process, late_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
distributed.initialize(f"127.0.0.1:{port}", 2, process)
mesh = Mesh(np.asarray(jax.devices()), ("data",))  # the CPU client: every process waits for all
if process == 0:
    time.sleep(late_s)  # still loading or compiling on a busy host
x = jax.make_array_from_callback((8,), NamedSharding(mesh, PartitionSpec("data")),
                                 lambda index: np.ones(2, np.float32))
print("sum", float(jax.jit(lambda a: a.sum())(x)), flush=True)
distributed.barrier("after")
"""


def test_a_peer_late_to_the_first_step_is_waited_for():
    """gloo gives a connection 30 s to find its peers: the processes connect as they start
    (distributed.connect_cpu_collectives), so a step over all devices that one process reaches
    35 s after the other still runs. Mostly waiting: about 40 s of wall time, little CPU."""
    port = distributed.free_port()
    procs = [subprocess.Popen([sys.executable, "-c", LATE_PEER, str(port), str(i), "35"], cwd=ROOT, env=env(2),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    for out in finish(procs):
        assert "sum 8.0" in out, out[-3000:]
