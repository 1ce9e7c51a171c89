"""Training: each architecture learns; metrics, metadata, TensorBoard; exact gradient accumulation;
NaN stops the run; clear errors for bad configs and data."""

import json

import numpy as np
import pytest
from helpers.train import tiny, tiny_config

from linscale_jax.run import checkpoint as ckpt
from linscale_jax.train import loop as trainer


@pytest.mark.parametrize("arch", ["llama", "tnl", "hgrn2", "cosformer2"])
def test_few_steps_lower_the_loss(arch, tmp_path):
    c = tiny_config(arch, steps=6, eval_every=6, eval_batches=1)
    c.checkpoint.update(every_steps=3)
    s = trainer.train(c, tmp_path)
    losses = [s["losses"][k] for k in range(1, 7)]
    assert np.mean(losses[-2:]) < losses[0] - 0.3, losses
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 7))
    for key in ("loss", "lr", "grad_norm", "tokens", "tokens_per_sec", "mfu", "flops"):
        assert np.isfinite(rows[-1][key]), key
    assert rows[-1]["tokens"] == 6 * 4 * 32 and "val_loss" in rows[-1]
    assert ckpt.list_steps(tmp_path) == [3, 6]
    meta = ckpt.load_metadata(tmp_path, 6)
    assert meta["arch"] == arch and meta["tokens"] == 6 * 4 * 32 and meta["n_params"] > 0
    assert meta["flops"] > 0 and meta["flops_exact"] > 0 and meta["config"]["model"]["arch"] == arch
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents*"))


def test_grad_accumulation_is_exact(tmp_path):
    ref = trainer.train(tiny_config(steps=6), tmp_path / "a")  # compiled by the llama test
    acc = trainer.train(tiny_config(steps=6, grad_accum=2), tmp_path / "b")
    np.testing.assert_allclose([acc["losses"][k] for k in range(1, 7)],
                               [ref["losses"][k] for k in range(1, 7)], rtol=0, atol=2e-5)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    c = tiny_config(steps=6)
    c.checkpoint.update(every_steps=2)
    trainer.train(c, tmp_path)
    c.train.steps, c.optim.lr = 8, float("inf")  # resumes at 6; step 7 makes the params inf
    with pytest.raises(trainer.NonFiniteLossError, match="at step 7.*last good checkpoint: 6"):
        trainer.train(c, tmp_path, allow_config_change=True)  # an lr change must be allowed
    assert ckpt.list_steps(tmp_path) == [2, 4, 6]


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match="arch one of"):
        tiny.get_config("mamba-d64")
    with pytest.raises(ValueError, match="unknown ladder size 'd7'"):
        tiny.get_config("tnl-d7")
    with pytest.raises(ValueError, match="needs 2 devices but 1 are available"):
        trainer.train(_with_mesh(tiny_config(), data=2), tmp_path)
    with pytest.raises(ValueError, match="grad_accum"):
        trainer.train(tiny_config(grad_accum=3), tmp_path)


def _with_mesh(c, **mesh):
    c.mesh.update(mesh)
    return c


def test_data_errors_surface(tmp_path):
    c = tiny_config()
    c.data.update(task="files", paths=str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="missing.txt"):
        trainer.train(c, tmp_path / "run")
    (tmp_path / "empty.txt").write_text("")
    c.data.paths = str(tmp_path / "empty.txt")
    with pytest.raises(ValueError, match="empty"):
        trainer.train(c, tmp_path / "run")
