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


def test_eval_only_checkpoints_resume_from_the_last_state(reference, tmp_path, capsys):
    """checkpoint.state_steps=2,4: checkpoints 1, 3, 5 hold params alone (eval reads them); a run
    that lost its last checkpoint (a kill after step 5's save) resumes from step 4, the newest
    with the optimizer and data position, moves 5 aside and writes it again bit for bit."""
    c = config()
    c.checkpoint.update(every_steps=1, state_steps="2,4", async_save=False)
    workdir = tmp_path / "run"
    trainer.train(c, workdir)
    held = {s: (workdir / "checkpoints" / str(s) / "opt_state").is_dir() for s in range(1, 7)}
    assert held == {1: False, 2: True, 3: False, 4: True, 5: False, 6: True}
    assert ckpt.load_metadata(workdir, 5)[ckpt.EVAL_ONLY] and ckpt.holds_state(ckpt.load_metadata(workdir, 6))
    model5 = ckpt.load_model(workdir, 5)[0]  # eval's reader takes an eval-only checkpoint
    shutil.rmtree(workdir / "checkpoints" / "6")
    capsys.readouterr()
    trainer.train(c, workdir)
    out = capsys.readouterr().out
    assert "the newest checkpoint with the training state" in out and "(step 4" in out
    moved = list((workdir / "checkpoints_discarded").iterdir())
    assert [p.name for p in moved[0].iterdir()] == ["5"]
    assert ckpt.list_steps(workdir) == [1, 2, 3, 4, 5, 6]
    assert logged_losses(workdir) == reference
    again = ckpt.load_model(workdir, 5)[0]
    import jax
    from flax import nnx
    assert all(bool((a == b).all()) for a, b in zip(jax.tree.leaves(nnx.state(model5, nnx.Param)),
                                                    jax.tree.leaves(nnx.state(again, nnx.Param))))


def test_state_steps_refused_with_retention():
    c = config()
    c.checkpoint.update(state_steps="3", keep=2)
    with pytest.raises(ValueError, match="checkpoint.keep=0"):
        ckpt.state_steps(c.checkpoint, STEPS)
    c.checkpoint.update(state_steps="3,x", keep=0)
    with pytest.raises(ValueError, match="comma list"):
        ckpt.state_steps(c.checkpoint, STEPS)
    c.checkpoint.state_steps = "3"
    assert ckpt.state_steps(c.checkpoint, STEPS) == {3, 6}
