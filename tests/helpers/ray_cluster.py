"""A real Ray cluster of this machine for the tests of study.ray_backend (tests/study/
test_ray_backend_*.py), loopback only: a head node (no CPUs) and a 2-CPU worker node started once
per test module (ray.cluster_utils.Cluster, every node on 127.0.0.1), the driver (the test
process) attached to it.

    from helpers.ray_cluster import cluster, no_task_left  # noqa: F401 (fixtures)
    study = mini_study(sizes="d32,d48")                     # the quick preset, smaller
    process = functools.partial(after_first_checkpoint, "tnl-d64", "kill")

`no_task_left` (autouse where imported) fails the test that leaves a run's task running on the
cluster after it ends, and ends that task's process (SIGKILL: the kernel frees its train.lock and
Ray its cores), so the next test meets an idle cluster whatever happened in this one. The fault
wrappers around runner.process_run are pickled by value to the workers.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from linscale_jax.study.ray_backend.cluster import LOCAL_ENV, TEMP_DIR

os.environ.update(LOCAL_ENV)  # read when ray is imported: loopback node addresses

import psutil  # noqa: E402
import ray  # noqa: E402
from ray import cloudpickle  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from linscale_jax import contract  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the wrappers below reach the workers
ROOT = Path(__file__).resolve().parents[2]
NODE = dict(node_ip_address="127.0.0.1", num_cpus=2, object_store_memory=80 * 2**20)
STEPS = 24
FINALS = {f"tnl-{s}": False for s in ("d32", "d48", "d64")}  # val_loss only
LEFT_S = 30.0  # how long a test's tasks get to end after it (Ray's own cleanup on a loaded machine)


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


def run_tasks() -> list:
    """The processes of this test process's Ray clusters that run a study's host task."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "host_task" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


@pytest.fixture(autouse=True)
def no_task_left():
    """After the test: no run's task still running on the cluster (else they are killed and the
    test fails naming them)."""
    yield
    deadline = time.time() + LEFT_S
    while (left := run_tasks()) and time.time() < deadline:
        time.sleep(0.5)
    for p in left:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
    assert not left, f"run tasks outlived the test by {LEFT_S:.0f}s: {[(p.pid, p.cmdline()) for p in left]}"


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


def rows(path, drop=("eval_seconds",)):
    """A CSV's rows, the columns `drop` aside."""
    return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(open(path))]


def eval_rows(run_workdir):
    """A run's evaluation rows by task and step, timing aside. Their order in the file is not the
    run's: the trainer writes a checkpoint's row once the checkpoint is final, so a checkpoint whose
    attempt died first gets its row from the study's eval after the resume, behind later ones."""
    rows_ = [json.loads(x) for x in Path(run_workdir, contract.EVAL_RESULTS).read_text().splitlines()]
    rows_.sort(key=lambda r: (r["task"], r["step"]))
    return [{k: v for k, v in r.items() if not k.endswith("seconds") and k != "workdir"} for r in rows_]
