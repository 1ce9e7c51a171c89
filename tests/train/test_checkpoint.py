"""Checkpoint schedule, the reading API (list_steps / load_metadata / load_model / save_model),
partial checkpoints, and starting training from saved weights (--init_from, params-only resume)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers.train import tiny_config

from linscale_jax.run import checkpoint as ckpt
from linscale_jax import data
from linscale_jax.train import loop as trainer
from linscale_jax.models import ModelConfig, build_model


def test_save_schedule_dense_plus_log_spaced():
    c = tiny_config().checkpoint
    c.update(every_steps=100, log_spaced=8)
    steps = sorted(ckpt.save_steps(c, 250))
    assert steps[:3] == [1, 2, 3] and {100, 200, 250} <= set(steps)
    early = [s for s in steps if s < 100]
    assert len(early) == 8 and all(b / a > 1.3 for a, b in zip(early[2:], early[3:]))
    c.update(every_steps=0, log_spaced=0)
    assert ckpt.save_steps(c, 7) == {7}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A model with non-default weights written by save_model (what the converters do)."""
    workdir = tmp_path_factory.mktemp("saved")
    config = tiny_config(steps=6)
    model = build_model(ModelConfig.from_config(config.model), rngs=nnx.Rngs(123))
    ckpt.save_model(workdir, model, config, step=0, metadata={"source": "test"})
    return workdir, config, model


def test_save_model_load_model_roundtrip(saved):
    workdir, config, model = saved
    assert ckpt.list_steps(workdir) == [0]
    meta = ckpt.load_metadata(workdir, 0)
    assert meta["source"] == "test" and meta["arch"] == "llama" and meta["tokens"] == 0
    assert meta["n_params"] > 0 and meta["config"]["model"]["d_model"] == 64
    loaded, cfg, meta2 = ckpt.load_model(workdir)
    assert cfg.model.d_model == 64 and meta2["step"] == 0
    tokens = jnp.arange(32, dtype=jnp.int32).reshape(2, 16) % 200
    forward = nnx.jit(lambda m: m(tokens))  # one compile: the three models share a graphdef
    np.testing.assert_array_equal(np.asarray(forward(loaded)), np.asarray(forward(model)))
    loaded2, _, _ = ckpt.load_model(workdir / "checkpoints" / "0")  # a step dir works too
    np.testing.assert_array_equal(np.asarray(forward(loaded2)), np.asarray(forward(model)))


def test_partial_and_missing_checkpoints(saved, tmp_path):
    (tmp_path / "checkpoints" / "12.orbax-checkpoint-tmp-5").mkdir(parents=True)
    (tmp_path / "checkpoints" / "13").mkdir()  # no metadata: incomplete
    assert ckpt.list_steps(tmp_path) == []
    with pytest.raises(FileNotFoundError, match="no complete checkpoints"):
        ckpt.load_model(tmp_path)
    with pytest.raises(FileNotFoundError, match="no complete checkpoint at step 5"):
        ckpt.load_model(saved[0], step=5)


def first_loss_of(model, config):
    batch = next(data.make_iterator(config))
    loss_sums = nnx.jit(trainer.loss_sums)  # one compile, not one per operation (eager)
    l, w = loss_sums(model, {k: jnp.asarray(batch[k]) for k in trainer.BATCH_KEYS})
    return float(l / w)


def test_init_from_and_params_only_resume(saved, tmp_path, capsys):
    workdir, config, model = saved
    expected = first_loss_of(model, config)
    s = trainer.train(config, tmp_path / "a", init_from=str(workdir))
    assert "Initialised parameters from" in capsys.readouterr().out
    assert s["losses"][1] == pytest.approx(expected, abs=1e-5)
    fresh = trainer.train(config, tmp_path / "b")
    assert abs(fresh["losses"][1] - expected) > 1e-3  # really different weights were used
    # a converter's params-only checkpoint in the run's own workdir: resume with a fresh optimizer
    ckpt.save_model(tmp_path / "c", model, config, step=0)
    s = trainer.train(config, tmp_path / "c")
    assert "params only: fresh optimizer" in capsys.readouterr().out
    assert s["losses"][1] == pytest.approx(expected, abs=1e-5)
    assert ckpt.list_steps(tmp_path / "c") == [0, 6]


def test_init_from_mismatched_model_is_a_clear_error(saved, tmp_path):
    config = tiny_config(steps=6)
    config.model.d_model = 96
    with pytest.raises(ValueError, match="d_model"):
        trainer.train(config, tmp_path, init_from=str(saved[0]))


def test_async_save_is_not_corrupted_by_donation(tmp_path):
    """The next (donating) step must not alter arrays an async save is still writing."""
    config = tiny_config(steps=6)
    config.checkpoint.update(every_steps=1, async_save=True)
    trainer.train(config, tmp_path)
    one, _, _ = ckpt.load_model(tmp_path, step=1)
    two, _, _ = ckpt.load_model(tmp_path, step=2)
    a = jax.tree.leaves(nnx.state(one, nnx.Param))
    b = jax.tree.leaves(nnx.state(two, nnx.Param))
    assert any(not np.array_equal(x, y) for x, y in zip(a, b))
    assert all(np.all(np.isfinite(x)) for x in a)
