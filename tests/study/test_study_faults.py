"""A study's promises with real processes (`python -m linscale_jax.study` in subprocesses, the mini
preset of helpers.study): one study per workdir, a killed driver takes its workers with it and an
immediate re-run resumes, a full disk is the storage line, and inputs that another study wrote (or
a tuning field a later stage reads) are refused before anything trains."""

from __future__ import annotations

import csv
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from helpers.study import ROOT, env, recall_csv, study_cmd, write_preset


def _lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


def _checkpoints(wd: Path) -> set:
    """(run, step) of every hashed checkpoint of the study at `wd`."""
    return {(p.parts[-4], int(p.parts[-2])) for p in wd.glob("runs/*/checkpoints/*/checksums-p0.json")}


def _wait(cond, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout:.0f}s")


def _top(wd: Path) -> dict:
    """The study directory's own files (the lock's holder without its heartbeat, which it refreshes)."""
    out = {p.name: p.read_bytes() for p in wd.iterdir() if p.is_file() and p.name != "study.lock"}
    holder = json.loads((wd / "study.lock").read_text())
    return dict(out, lock={k: v for k, v in holder.items() if k != "heartbeat"})


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.slow  # a study trained twice over (killed, then resumed): about 2 min on 2 cores
def test_a_second_study_is_refused_and_a_killed_driver_takes_its_workers_and_resumes(tmp_path):
    """A second study on a workdir in use: one line naming the first's pid and host, nothing
    written, the first goes on (its workers held meanwhile, so it cannot end first). kill -9 of the first's driver: its pool workers end with it (none
    goes on with the queue); the same command run at once takes over the dead study's lock, resumes
    the killed runs from their checkpoints and writes the table and report with every checkpoint."""
    preset, wd = write_preset(tmp_path, workers=2), tmp_path / "study"
    first = subprocess.Popen(study_cmd(preset, wd), cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: _checkpoints(wd), 600, "checkpoint of the first study")
        workers = [p.pid for p in psutil.Process(first.pid).children()
                   if "spawn_main" in " ".join(p.cmdline())]
        assert len(workers) == 2
        for w in workers:  # held while the second study runs: a warm-cache study could finish meanwhile
            psutil.Process(w).suspend()
        top = _top(wd)
        t0 = time.time()
        second = subprocess.run(study_cmd(preset, wd), cwd=ROOT, env=env(), capture_output=True, text=True,
                                timeout=300)
        out = _lines(second.stdout + second.stderr)
        print(f"\nsecond study: rc {second.returncode} in {time.time() - t0:.1f}s: {out}")
        assert second.returncode == 1 and len(out) == 1, out
        assert out[0].startswith(f"ERROR: {wd} is in use by another study: pid {first.pid} on "
                                 f"{socket.gethostname()} (since "), out
        assert _top(wd) == top  # nothing written
        assert first.poll() is None and all(_alive(p) for p in workers)  # the first goes on
        seen = _checkpoints(wd)
        for w in workers:
            psutil.Process(w).resume()
        _wait(lambda: _checkpoints(wd) - seen, 600, "new checkpoint after the refusal")
    finally:
        first.kill()
        first.wait()
    t_kill = time.time()
    _wait(lambda: not any(_alive(p) for p in workers), 10, "end of the killed driver's workers")
    print(f"workers gone {time.time() - t_kill:.1f}s after the kill -9")
    kept = _checkpoints(wd)
    rerun = subprocess.run(study_cmd(preset, wd), cwd=ROOT, env=env(), capture_output=True, text=True,
                           timeout=900)
    text = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, text
    assert f"Took over a stale lock of pid {first.pid} on {socket.gethostname()}" in text
    resumed = {r for r, _ in kept if "Resuming from" in (wd / "runs" / r / "study.log").read_text()}
    unfinished = {r for r, _ in kept} - {r for r, s in kept if s == 24}
    assert unfinished and unfinished <= resumed  # resumed from their checkpoints, not restarted
    assert kept <= _checkpoints(wd)  # nothing the killed study saved was lost
    rows = list(csv.DictReader(open(wd / "table.csv")))
    assert {(r["run"], int(r["step"])) for r in rows} == {
        (f"tnl-{s}", step) for s in ("d32", "d48", "d64") for step in (1, 3, 8, 16, 24)}
    assert (wd / "report.md").exists() and not (wd / "study.lock").exists()


@pytest.mark.slow  # a study's two workers compile and train up to their first save: about 30 s on 2 cores
def test_a_study_that_fills_the_disk_ends_in_the_storage_line(tmp_path):
    """The study's runs on a 1 MiB file system (a tmpfs in a private mount namespace): the study
    ends with one line naming each failed run's directory on the full disk and the fix, not the
    library's pages of text (Orbax's and TensorStore's tracebacks stay off the console)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a small tmpfs")
    wd = tmp_path / "study"
    wd.mkdir()
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {wd}"],
                           capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"no user/mount namespaces here: {probe.stderr.strip()}")
    preset = write_preset(tmp_path, workers=2)
    inner = " ".join(f"'{c}'" for c in study_cmd(preset, wd))
    p = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {wd} && exec {inner}"],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    out = _lines(p.stdout + p.stderr)
    errors = [x for x in out if x.startswith("ERROR: ")]
    print("\n" + "\n".join(out))
    assert p.returncode == 1 and len(errors) == 1, out
    line = errors[0]
    assert "run(s) failed" in line and f"no space left on device while writing under {wd}/runs/tnl-" in line, line
    assert "free disk space (or move the workdir), then re-run the same command" in line, line
    assert "(log: " in line and "Traceback" not in p.stdout + p.stderr and len(line) < 1500, line


def test_inputs_of_other_studies_and_late_tuning_fields_are_refused_before_training(tmp_path):
    """A recall study's recall.csv with a NaN accuracy (study.recall_from), and the tuning grid with
    a replicate size it does not tune: one line naming the file and row (the field), exit status 1,
    no run started. (About 25 s on 2 cores: two short processes.)"""
    preset, wd = write_preset(tmp_path), tmp_path / "study"
    recall_csv(tmp_path / "recall", tnl="nan")
    cases = [(study_cmd(preset, wd, f"--config.recall_from={tmp_path / 'recall'}"),
              f"ERROR: {tmp_path / 'recall' / 'recall.csv'} row 4: accuracy is 'nan', not a finite number; "),
             (study_cmd(str(ROOT / "configs" / "study" / "tune.py"), tmp_path / "tune",
                        "--config.tune.replicate_sizes=smallest,d17"),
              "ERROR: --config.tune.replicate_sizes='smallest,d17': 'd17' is not smallest, largest or one of "
              "the tuned sizes (d16l2, d16, d32l2, d32, d48); fix that field")]
    for cmd, want in cases:
        p = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
        out = _lines(p.stdout + p.stderr)
        assert p.returncode == 1 and len(out) == 1 and out[0].startswith(want), out
    assert not wd.exists() and not (tmp_path / "tune").exists()  # refused before anything was written
