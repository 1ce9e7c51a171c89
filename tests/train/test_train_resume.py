"""Exact resume: SIGTERM saves and the re-run continues bit-identically; a SIGKILLed CLI run
restarted with the same command logs the same losses as an uninterrupted run; a corrupt latest
checkpoint falls back to the previous one."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from helpers.train import ROOT, cli_overrides, tiny_config

from linscale_jax.run import checkpoint as ckpt
from linscale_jax.train import metrics as metrics_lib
from linscale_jax.train import loop as trainer

STEPS = 6  # tiny_config(steps=6): shares compilations with test_train.py


def config():
    c = tiny_config(steps=STEPS)
    c.checkpoint.update(every_steps=3, async_save=True)
    return c


def logged_losses(workdir):
    rows = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    return [r["loss"] for r in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("uninterrupted")
    trainer.train(config(), workdir)
    return logged_losses(workdir)


@pytest.fixture(scope="module")
def sigterm_run(tmp_path_factory):
    """A run that receives SIGTERM at step 2, then the same call again."""
    workdir = tmp_path_factory.mktemp("sigterm")
    write = metrics_lib.MetricsLogger.write

    def write_then_term(self, row):
        write(self, row)
        if row["step"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(metrics_lib.MetricsLogger, "write", write_then_term)
        first = trainer.train(config(), workdir)
    steps_after_term = ckpt.list_steps(workdir)
    second = trainer.train(config(), workdir)
    return workdir, first, steps_after_term, second


def test_sigterm_saves_and_resume_is_bit_identical(reference, sigterm_run):
    workdir, first, steps_after_term, second = sigterm_run
    assert first["stopped"] == "SIGTERM" and first["step"] == 2
    assert steps_after_term == [2]
    assert second["step"] == STEPS and ckpt.list_steps(workdir) == [2, 3, 6]
    assert logged_losses(workdir) == reference  # exact float equality


def test_corrupt_latest_checkpoint_falls_back(reference, sigterm_run, tmp_path, capsys):
    workdir = tmp_path / "run"
    shutil.copytree(sigterm_run[0], workdir)
    for f in (workdir / "checkpoints" / "6" / "params").rglob("*"):
        if f.is_file() and f.stat().st_size > 0 and "ocdbt" in str(f.relative_to(workdir)):
            f.write_bytes(b"garbage")
    trainer.train(config(), workdir)
    out = capsys.readouterr().out
    assert "checkpoint step 6 is corrupt or incomplete" in out and "Resuming from" in out
    assert "(step 3" in out
    assert list((workdir / "checkpoints_corrupt").iterdir())
    assert logged_losses(workdir) == reference


KILL_AT_STEP_5 = """
import os, signal, sys, time
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.train import metrics as metrics_lib
from linscale_jax.train import cli as train
from absl import app
write = metrics_lib.MetricsLogger.write
def write_then_kill(self, row):
    write(self, row)
    if row["step"] == 5:
        deadline = time.time() + 120
        while 3 not in ckpt.list_steps(self.path.parent) and time.time() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGKILL)
metrics_lib.MetricsLogger.write = write_then_kill
sys.argv = ["train"] + sys.argv[1:]
app.run(train.main)
"""


def test_sigkill_then_same_command_logs_same_losses(reference, tmp_path):
    workdir = tmp_path / "run"
    args = ["--config=configs/tiny.py:llama-d64", f"--workdir={workdir}",
            *cli_overrides(config())]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    killed = subprocess.run([sys.executable, "-c", KILL_AT_STEP_5, *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert 3 in ckpt.list_steps(workdir) and 6 not in ckpt.list_steps(workdir)
    rerun = subprocess.run([sys.executable, "-m", "linscale_jax.train", *args], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Resuming from" in rerun.stdout
    assert logged_losses(workdir) == reference
