"""study.workers: runs of a study in pinned worker processes (longest first, failures isolated,
SIGTERM forwarded, a finished run whose config changed refused with train's line). The real
trainer under workers is covered by the quick study's resume (tests/study/test_study.py, slow),
whose preset has workers = 2."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers.study import FakeRun

from linscale_jax.study import backends, workers


def record(study, run, log, final):
    """A stand-in for runner.process_run: records where and how it ran."""
    log(f"processing {run.name}")
    Path(run.workdir, "ran.json").write_text(json.dumps(dict(
        pid=os.getpid(), cores=sorted(os.sched_getaffinity(0)), final=final, t=time.time(),
        xla_flags=os.environ.get("XLA_FLAGS", ""), study=study,
        malloc={k: os.environ.get(k) for k in backends.MALLOC_ENV})))
    if run.name == "bad":
        raise ValueError("this run's data is empty")
    time.sleep(0.3)


def stop_like_the_trainer(study, run, log, final):
    """runner.process_run after a trainer saved on SIGTERM: a clean stop, not a failure."""
    from linscale_jax.errors import Stopped

    raise Stopped(f"[study] stopped by SIGTERM: {run.name} saved its checkpoint at step 3")


def wait_for_term(study, run, log, final):
    Path(run.workdir, "ready").write_text("")
    time.sleep(60)


def fail_like_a_full_disk_or_a_bug(study, run, log, final):
    """A run's save hitting a full disk (what Orbax and TensorStore raise comes down to ENOSPC), or
    a plain bug."""
    import errno

    if run.name == "full":
        try:
            raise OSError(errno.ENOSPC, "No space left on device", os.path.join(run.workdir, "checkpoints", "8"))
        except OSError as e:
            raise RuntimeError("Orbax: failed to save, see the details below\n" + "x" * 700) from e
    raise KeyError("n_params")


def hold_forever(study, run, log, final):
    Path(run.workdir, "pid").write_text(str(os.getpid()))
    time.sleep(300)


def _runs(tmp_path, names_flops):
    return [FakeRun(n, str(tmp_path / n), f) for n, f in names_flops]


def test_core_sets_split_the_cores_evenly():
    assert workers.core_sets(2, [0, 1]) == [[0], [1]]
    assert workers.core_sets(2, [0, 1, 2, 3, 4]) == [[0, 2, 4], [1, 3]]
    assert workers.core_sets(3, [5]) == [[5], [5], [5]]  # fewer cores than workers: all share


def test_runs_in_pinned_processes_longest_first_and_a_failure_does_not_stop_the_others(tmp_path):
    runs = _runs(tmp_path, [("small", 1.0), ("bad", 2.0), ("big", 100.0), ("mid", 10.0), ("tiny", 0.5)])
    finals = {r.name: r.name == "big" for r in runs}
    lines = []
    before = {k: os.environ.get(k) for k in ("XLA_FLAGS", *backends.MALLOC_ENV)}
    out = workers.run_parallel({"id": 7}, runs, finals, 2, record, log=lines.append,
                               eta=lambda timed, todo: 60.0 * len(todo))
    assert {k: os.environ.get(k) for k in before} == before  # the parent's environment is untouched
    assert out["stopped"] == [] and set(out["failed"]) == {"bad"}
    assert out["failed"]["bad"].startswith("this run's data is empty (log: ")  # the trainer's one line
    assert str(tmp_path / "bad" / "study.log") in out["failed"]["bad"]
    assert "Traceback" in (tmp_path / "bad" / "study.log").read_text()
    ran = {r.name: json.loads(Path(r.workdir, "ran.json").read_text()) for r in runs}
    assert all(Path(r.workdir, "study.log").read_text().startswith(f"processing {r.name}") for r in runs)
    pids = {v["pid"] for v in ran.values()}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert all("--xla_cpu_multi_thread_eigen=false" in v["xla_flags"] for v in ran.values())
    malloc = {k: before[k] or v for k, v in backends.MALLOC_ENV.items()}  # a value already set wins
    assert all(v["study"] == {"id": 7} and v["malloc"] == malloc for v in ran.values())
    assert [n for n, v in ran.items() if v["final"]] == ["big"]
    if len(os.sched_getaffinity(0)) >= 2:
        assert len(pids) == 2  # both workers took runs
        per_pid = {v["pid"]: tuple(v["cores"]) for v in ran.values()}
        assert all(len(c) == len(os.sched_getaffinity(0)) // 2 for c in per_pid.values())
        assert len(set(per_pid.values())) == 2  # disjoint cores
    order = sorted(ran, key=lambda n: ran[n]["t"])
    assert set(order[:2]) == {"big", "mid"} and order[-1] == "tiny"  # longest first
    text = "\n".join(lines)
    assert "on 2 worker processes" in text and "finished 5/5" in text and "FAILED" in text
    assert "ETA" in text


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_is_forwarded_and_the_runs_stop(tmp_path, sig):
    """SIGTERM, or one Ctrl-C (SIGINT), to the study: the workers stop, the study waits for them
    and returns the stopped runs and the signal (study.executor: one line, exit status 0)."""
    runs = _runs(tmp_path, [(f"r{i}", float(i)) for i in range(4)])

    def term_when_ready():
        deadline = time.time() + 60
        while time.time() < deadline and not any(Path(r.workdir, "ready").exists() for r in runs):
            time.sleep(0.1)
        os.kill(os.getpid(), sig)

    threading.Thread(target=term_when_ready, daemon=True).start()
    t0 = time.time()
    lines = []
    before, term_before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    out = workers.run_parallel({}, runs, {r.name: False for r in runs}, 2, wait_for_term,
                               log=lines.append)
    assert time.time() - t0 < 50  # not the 60 s sleep: the workers were stopped
    assert out["stopped"] and not out["failed"] and out["signal"] == sig.name
    assert not [x for x in lines if "stopped" in x]  # no line per run: the caller prints one
    assert signal.getsignal(signal.SIGINT) is before
    assert sum(Path(r.workdir, "ready").exists() for r in runs) <= 2  # queued runs never started
    assert signal.getsignal(signal.SIGTERM) is term_before  # the study's forwarder is removed


def test_every_run_error_is_the_trainers_one_line(tmp_path):
    """A run that fills the disk: the storage line (the file and the fix), not the library's text;
    an unexpected error: the one-line 'unexpected' form; each with the run's log."""
    runs = _runs(tmp_path, [("full", 2.0), ("bug", 1.0)])
    out = workers.run_parallel({}, runs, {r.name: False for r in runs}, 2, fail_like_a_full_disk_or_a_bug,
                               log=lambda m: None)
    full, bug = out["failed"]["full"], out["failed"]["bug"]
    assert full.startswith(f"no space left on device while writing {tmp_path}/full/checkpoints/8; free disk "
                           "space (or move the workdir), then re-run the same command: it resumes"), full
    assert full.endswith(f"(log: {tmp_path}/full/study.log)") and "Orbax" not in full and "x" * 50 not in full
    assert bug.startswith("unexpected KeyError: 'n_params' (a bug or an environment problem") and \
        bug.endswith(f"(log: {tmp_path}/bug/study.log)")


def test_the_workers_die_with_their_driver(tmp_path):
    """kill -9 of the process that runs the pool: its workers end at once (the kernel's SIGKILL,
    PR_SET_PDEATHSIG) instead of going on with the queue and holding their runs' locks."""
    import subprocess
    import sys

    script = (f"import sys; sys.path[:0] = {[str(Path(__file__).parent), str(Path(__file__).parents[1]), str(Path(__file__).parents[2])]!r}\n"
              "from test_workers import FakeRun, hold_forever\n"
              "from linscale_jax.study import workers\n"
              f"runs = [FakeRun(n, {str(tmp_path)!r} + '/' + n, 1.0) for n in ('a', 'b', 'c')]\n"
              "workers.run_parallel({}, runs, {r.name: False for r in runs}, 2, hold_forever, log=print)\n")
    driver = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path)
    deadline = time.time() + 120
    pids = []
    while time.time() < deadline and len(pids) < 2:
        pids = [int(p.read_text()) for p in tmp_path.glob("*/pid") if p.read_text()]
        time.sleep(0.2)
    assert len(pids) == 2, pids
    driver.kill()
    driver.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)
    assert not Path(tmp_path, "c", "pid").exists()  # the queue was not taken up


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_run_stopped_by_its_trainer_is_stopped_not_failed_and_ends_the_worker(tmp_path):
    runs = _runs(tmp_path, [(f"r{i}", float(i)) for i in range(4)])
    out = workers.run_parallel({}, runs, {r.name: False for r in runs}, 2, stop_like_the_trainer,
                               log=lambda m: None)
    assert not out["failed"] and 1 <= len(out["stopped"]) <= 2  # no worker took a second run


def test_a_finished_run_whose_config_changed_is_refused_with_the_trainers_line(tmp_path):
    """runner.process_run in the pool: a run trained to its last step with another config is not
    skipped as trained but refused with train's own line (identity.RunIdentityError), named with
    its log; the Ray backend runs the same process_run (tests/study/test_ray_backend_runs.py)."""
    from flax import nnx
    from helpers.train import tiny_config

    from linscale_jax.models import ModelConfig, build_model
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.run.identity import RunIdentityError
    from linscale_jax.study import presets
    from linscale_jax.train import loop as trainer
    from linscale_jax.study.scaling import runner

    old = tiny_config(steps=4)
    run = FakeRun("llama-d64", str(tmp_path / "run"), 1.0, steps=4, config=old.copy_and_resolve_references())
    ckpt.save_model(run.workdir, build_model(ModelConfig.from_config(old.model), rngs=nnx.Rngs(0)),
                    old, step=4)
    run.config.optim.lr = 3e-3
    with pytest.raises(RunIdentityError) as train_refused:  # what `python -m linscale_jax.train` says
        trainer.train(run.config, run.workdir)
    assert "optim.lr 0.01 -> 0.003" in str(train_refused.value)
    study = presets.preset("quick")  # process_run reads its eval settings before training
    out = workers.run_parallel(study, [run], {run.name: False}, 1, runner.process_run, log=lambda m: None)
    assert out["stopped"] == [] and out["signal"] is None
    assert out["failed"] == {run.name: f"{train_refused.value} (log: {run.workdir}/study.log)"}
    assert out["errors"] == {run.name: RunIdentityError}  # the class travels back, not a message prefix
    assert "trained already" not in Path(run.workdir, "study.log").read_text()


def test_workers_for_rules():
    from ml_collections import ConfigDict

    from linscale_jax.study import executor as runner

    assert runner.workers_for(ConfigDict(dict(workers=2)), 20, None) == 2
    assert runner.workers_for(ConfigDict(dict(workers=4)), 3, None) == 3  # at most one per run
    assert runner.workers_for(ConfigDict(dict(workers=2)), 20, 1) == 1  # max_runs: in order, here
    with pytest.raises(ValueError, match="study.workers must be >= 1"):
        runner.workers_for(ConfigDict(dict(workers=0)), 20, None)


def test_eta_scales_with_flops_until_sizes_spread_enough_to_fit_a_slope():
    from linscale_jax.study import executor as runner

    assert runner.eta_seconds([(10.0, 100.0)], [5.0, 20.0]) == 250.0  # proportional to FLOPs
    near = [(10.0, 100.0), (10.1, 140.0)]  # nearly equal FLOPs: no wild slope from two points
    assert runner.eta_seconds(near, [10.0]) == 240.0 / 20.1 * 10.0
    spread = [(1.0, 30.0), (2.0, 40.0), (4.0, 60.0)]  # t = 20 + 10·F
    assert abs(runner.eta_seconds(spread, [8.0]) - 100.0) < 1e-6
    assert runner.eta(spread, []).startswith("ETA 0m00s") and runner.eta([], [1.0]) == "ETA after the first run"
