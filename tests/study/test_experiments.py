"""The experiment registry and the one executor, on a toy kind whose runs write a file (no training):
every registered kind's preset declares it; the same joined result in this process and in the local
pool; a failed run is one line naming it and its log, its outcome carrying the exception class;
stored runs are skipped; shards, --join_only, --dry_run and a staged plan; a stop is one line;
the command line's subcommands refuse another command's flag in one line. About 40 s on 2 cores
(the pool's two spawned processes, one CLI subprocess)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_collections
import pytest
from helpers.study import FakeRun

from linscale_jax.errors import Stopped
from linscale_jax.study import executor, experiments
from linscale_jax.study.executor import Status
from linscale_jax.study.experiments import Kind

ROOT = Path(__file__).resolve().parents[2]


def toy_process(study, run, log, final):
    """A run: its file, or the error study.bad asks for."""
    if run.name == study.get("bad", ""):
        raise ValueError(f"{run.name}'s data is empty")
    os.makedirs(run.workdir, exist_ok=True)
    Path(run.workdir, "out.json").write_text(json.dumps(dict(name=run.name, pid=os.getpid())))


def stop_process(study, run, log, final):
    raise Stopped(f"[study] stopped by SIGTERM: {run.name} saved its checkpoint at step 3")


def toy_plan(study, workdir):
    names = [f"r{i}" for i in range(int(study.runs))]
    if study.get("staged"):  # stage 2 (r2, r3) once stage 1 (r0, r1) is done
        done = {n for n in names if Path(workdir, "runs", n, "out.json").exists()}
        names = [n for n in (names[:2] if not {"r0", "r1"} <= done else names[2:4]) if n not in done]
    return [FakeRun(n, os.path.join(workdir, "runs", n), float(i + 1)) for i, n in enumerate(names)]


def toy_join(study, runs, workdir, ctx):
    got = sorted(json.loads(p.read_text())["name"] for p in Path(workdir, "runs").glob("*/out.json"))
    return {"names": got, "runs_s": ctx.runs_s}


def toy_report(study, workdir, joined, ctx):
    path = Path(workdir, "report.md")
    path.write_text(" ".join(joined["names"]))
    return str(path)


def toy(**changes) -> experiments.Experiment:
    return experiments.Experiment(kind=Kind.NOISE, plan=toy_plan, process=toy_process, join=toy_join,
                                  report=toy_report, **changes)


@pytest.fixture
def registered(monkeypatch):
    """The toy kind in the registry in place of "noise" (for this test only)."""
    experiments.get(Kind.NOISE)  # the real kinds discovered first
    monkeypatch.setitem(experiments._REGISTRY, Kind.NOISE, toy(
        finished=lambda study, run: Path(run.workdir, "out.json").exists()))


def study(**fields):
    return ml_collections.ConfigDict(dict(dict(kind="noise", runs=4, workers=1), **fields))


def test_every_kind_is_registered_and_every_preset_declares_one():
    experiments.discover()
    assert set(experiments._REGISTRY) == set(Kind)
    from linscale_jax.run import config_file
    from linscale_jax.study.presets import preset

    for name in config_file.packaged("study"):
        assert experiments.kind_of(preset(name)) in Kind, name
    with pytest.raises(ValueError, match="declares no kind; set kind to one of scaling, tune"):
        experiments.kind_of(ml_collections.ConfigDict(dict(archs="llama")))
    with pytest.raises(ValueError, match="study.kind='sweep' is not a kind of experiment"):
        experiments.kind_of(study(kind="sweep"))


@pytest.mark.parametrize("workers", [1, 2])
def test_serial_and_pool_give_the_same_result_and_a_failure_is_one_line(registered, tmp_path, workers):
    wd = tmp_path / "study"
    with pytest.raises(executor.RunsFailed) as failed:
        experiments.run(study(workers=workers, bad="r1"), str(wd), log=lambda m: None)
    msg = str(failed.value)
    assert "\n" not in msg and msg.startswith("1 run(s) failed, the others finished")
    assert f"r1: r1's data is empty (log: {wd}/runs/r1/study.log)" in msg
    assert "Traceback" in (wd / "runs" / "r1" / "study.log").read_text()
    pids = {json.loads((wd / "runs" / n / "out.json").read_text())["pid"] for n in ("r0", "r2", "r3")}
    assert (os.getpid() in pids) == (workers == 1)
    lines = []
    out = experiments.run(study(workers=workers), str(wd), log=lines.append)  # only r1 is left
    assert out["processed"] == 1 and out["names"] == ["r0", "r1", "r2", "r3"]
    assert "[study] 4 run(s), 3 finished already" in lines
    assert (wd / "report.md").read_text() == "r0 r1 r2 r3"


def test_outcomes_carry_the_exception_class_and_a_stop_is_one_line(tmp_path):
    runs = toy_plan(study(runs=2), str(tmp_path))
    done = executor.execute(study(bad="r0"), runs, toy_process, log=lambda m: None)
    assert done.outcomes["r0"].status is Status.FAILED and done.outcomes["r0"].error is ValueError
    assert done.outcomes["r1"].status is Status.DONE and done.outcomes["r1"].seconds >= 0
    stop = executor.execute(study(), runs, stop_process, log=lambda m: None)
    assert stop.outcomes["r0"].status is Status.STOPPED and stop.outcomes["r1"].status is Status.NOT_STARTED
    with pytest.raises(Stopped, match=r"^\[study\] stopped by a signal: r0 saved .* re-run the same command"):
        stop.check()


def test_shards_join_only_dry_run_and_a_staged_plan(registered, tmp_path, capsys):
    wd = str(tmp_path / "study")
    for i in range(2):  # one invocation per host: nothing joined
        out = experiments.run(study(), wd, experiments.Options(shard=f"{i}/2"), log=lambda m: None)
        assert out["processed"] == 2 and "names" not in out
    out = experiments.run(study(), wd, experiments.Options(join_only=True), log=lambda m: None)
    assert out["processed"] == 0 and out["names"] == ["r0", "r1", "r2", "r3"] and out["runs_s"] is None
    experiments.run(study(), str(tmp_path / "dry"), experiments.Options(dry_run=True, shard="1/2"))
    text = capsys.readouterr().out
    assert text.startswith("2 run(s) in shard 1/2 of 4:") and "r1" in text and "r0" not in text
    assert not (tmp_path / "dry").exists()
    with pytest.raises(ValueError, match="--approach fits a scaling study's laws"):
        experiments.run(study(), wd, experiments.Options(approach=2))
    staged = str(tmp_path / "staged")  # plan asked again after each stage until it has no runs
    experiments._REGISTRY[Kind.NOISE] = dataclasses.replace(experiments._REGISTRY[Kind.NOISE], staged=True)
    out = experiments.run(study(staged=True), staged, log=lambda m: None)
    assert out["processed"] == 4 and out["names"] == ["r0", "r1", "r2", "r3"]


@pytest.mark.slow  # a CLI subprocess: about 30 s on 2 loaded cores
def test_the_command_line_refuses_another_commands_flag_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "linscale_jax.study", "verdicts", f"--workdir={tmp_path}",
                          "--table=t.csv"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].endswith(
        "--workdir is not a flag of `python -m linscale_jax.study verdicts`; it belongs to an experiment run")
