"""The trainer's checkpoint val_loss rows (train(..., scores=CheckpointScores(...))) and a cooldown
branch's are eval's rows, bit for bit: eval then restores nothing for them, and a resume that writes
a checkpoint again scores it once."""

import shutil

from helpers.train import tiny_config

from linscale_jax.eval import runner
from linscale_jax.eval.checkpoint_scores import CheckpointScores
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.study.scaling import cooldown
from linscale_jax.train import loop as trainer

N = 2  # validation batches


def config():
    c = tiny_config(steps=6)  # shares compilations with test_train.py / test_train_resume.py
    c.checkpoint.update(every_steps=3, async_save=True)
    return c


def test_trainer_rows_are_evals_and_a_resume_scores_once(tmp_path, monkeypatch):
    workdir = tmp_path / "run"
    first = trainer.train(config(), workdir, scores=CheckpointScores(config(), workdir, N))
    rows = runner.read_results(str(workdir))
    assert [(r["step"], r["task"]) for r in rows] == [(3, "val_loss"), (6, "val_loss")]

    branch = cooldown.cooldown(config(), str(workdir), 3, 0.5, str(tmp_path / "cool"), val_batches=N)
    drop = lambda r: {k: v for k, v in r.items() if k != "eval_seconds"}  # noqa: E731
    for scored in (workdir, tmp_path / "cool"):  # the same checkpoints scored by eval after a restore
        restored = tmp_path / "restored" / scored.name
        shutil.copytree(scored / "checkpoints", restored / "checkpoints")
        evals = runner.evaluate(str(restored), "all", ("val_loss",), ctx_kwargs=dict(val_batches=N),
                                log=lambda *_: None)
        assert [drop(r) for r in runner.read_results(str(scored))] == [drop(r) for r in evals]  # exact
    assert [r["step"] for r in runner.read_results(branch)] == [5]

    def no_restore(*a, **k):
        raise AssertionError("eval restored a checkpoint the trainer scored")

    monkeypatch.setattr(runner, "load_run", no_restore)
    assert runner.evaluate(str(workdir), "all", ("val_loss",), ctx_kwargs=dict(val_batches=N),
                           log=lambda *_: None) == []

    shutil.rmtree(workdir / "checkpoints" / "6")  # a kill after step 6's row: resumes from 3
    second = trainer.train(config(), workdir, scores=CheckpointScores(config(), workdir, N))
    assert second["losses"][6] == first["losses"][6] and ckpt.list_steps(workdir) == [3, 6]
    assert runner.read_results(str(workdir)) == rows  # step 6 written again, not scored twice
