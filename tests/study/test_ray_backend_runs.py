"""study.ray_backend's runs on a real Ray cluster of this machine (helpers.ray_cluster), against the
local pool. The runs are a miniature quick study (tnl at its 3 sizes with one layer, 24 steps,
val_loss at 5 checkpoints), trained once for the module by the local pool (study.workers).

- the study on Ray, compiling its own programs, one of whose runs is killed with SIGKILL after its
  first checkpoint, gives the local pool's table.csv (timing aside) and fit/fits.json: the killed
  run was retried, resumed from its checkpoint and equals the uninterrupted run; its control actor
  answers late (a loaded head node) and the driver says so and waits on instead of failing;
- through experiments.run: the node running one run is removed mid-run and replaced, and the run
  completes on the new node with the local pool's numbers; an application error of another run is
  not retried, is one line naming the run and its log, and the first run still finishes; then a
  finished run whose config changed is refused with the trainer's line;
- the recall and tuning kinds (shrunk presets) on Ray give the local pool's recall.csv and
  tune/cells.csv (the tuning grid staged over two rounds of Ray tasks).
The kills and the node loss are made deterministic by test-only `process` wrappers (pickled by
value to the workers) around runner.process_run. The gangs: tests/study/test_ray_backend_teardown.py.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

import ml_collections
import pytest

from helpers.ray_cluster import (FINALS, NODE, after_first_checkpoint, cluster, eval_rows, mini_study,  # noqa: F401
                                 no_task_left, rows)
from ray import cloudpickle

from linscale_jax.run import checkpoint as ckpt
from linscale_jax.study import executor, experiments, ray_backend
from linscale_jax.study.ray_backend import control as control_mod, driver as driver_mod, own_node
from linscale_jax.study.ray_backend.status import read_status
from linscale_jax.study.scaling import plan, runner

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # SlowControl reaches the head node


class SlowControl(control_mod.Control):
    """The control actor of a loaded head node: its first drain answers after 3 s."""

    def drain(self):
        if not getattr(self, "_slowed", False):
            self._slowed = True
            time.sleep(3.0)
        return super().drain()


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


@pytest.mark.slow  # trains runs in Ray workers
def test_ray_study_with_a_killed_run_equals_the_local_pool(cluster, local_pool, tmp_path, monkeypatch):  # noqa: F811
    study, local = local_pool
    monkeypatch.setattr(driver_mod, "Control", SlowControl)  # a late answer: waited for, said once
    monkeypatch.setattr(own_node, "CONTROL_WARN_S", 1.0)
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
    assert text.count("the control actor has not answered for") == 1, text
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
    assert rows(Path(wd, "table.csv")) == rows(Path(local, "table.csv"))
    a, b = (json.loads(Path(d, "fit", "fits.json").read_text()) for d in (wd, local))
    assert a == b and set(a) == {"tnl"}


@pytest.mark.slow  # trains a run in Ray workers
def test_a_lost_node_moves_the_run_and_an_application_error_is_not_retried(cluster, local_pool, tmp_path,  # noqa: F811
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
    assert eval_rows(moved.workdir) == eval_rows(Path(local_pool[1], "runs", moved.name))
    # the finished run's config changed: refused with the trainer's line, not retried
    study.overrides.optim.lr = 1e-3
    out = ray_backend.run(study, plan.build_plan(study, wd)[:1], {moved.name: False}, process_run, wd,
                          cluster.address, log=lines.append)
    assert "config differs from the run" in out["failed"][moved.name]
    assert "optim.lr 0.003 -> 0.001" in out["failed"][moved.name]
    assert json.loads(Path(moved.workdir, "status.json").read_text())["attempt"] == 1


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
def test_recall_and_tune_on_ray_give_the_local_pools_results(cluster, tmp_path, monkeypatch, kind):  # noqa: F811
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
        assert rows(Path(far, "recall.csv")) == rows(Path(local, "recall.csv"))
        assert {r["arch"] for r in rows(Path(far, "recall.csv"))} == {"llama", "tnl+short_conv=4"}
        status = json.loads(Path(far, "runs", "llama-d16e8-s0-lr0.003", "status.json").read_text())
        assert status["state"] == "done" and status["attempt"] == 1
    else:
        assert rows(Path(far, "tune", "cells.csv")) == rows(Path(local, "tune", "cells.csv"))
        assert len(rows(Path(far, "tune", "cells.csv"))) == 6  # a stage, then its re-tune
