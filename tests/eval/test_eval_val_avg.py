"""val_loss_avg: the window of checkpoints it averages, that the averaged weights are the mean of
those checkpoints' weights, and that its loss is the plain val_loss of that averaged model."""

import jax
import numpy as np
import pytest
from flax import nnx
from helpers.train import tiny_config

from linscale_jax.eval import val_loss as vl
from linscale_jax.run import checkpoint as ckpt
from linscale_jax import data
from linscale_jax.models import ModelConfig, build_model


def test_window_steps():
    steps = [64, 128, 256, 384, 512, 640, 768, 896, 1024]
    assert vl.window_steps(steps, 1024) == [768, 896, 1024]  # the last quarter of the steps so far
    assert vl.window_steps(steps, 128) == [128]
    assert vl.window_steps(steps, 512, 0.5) == [256, 384, 512]
    with pytest.raises(ValueError, match="fraction"):
        vl.window_steps(steps, 512, 1.0)


def test_averaged_weights_and_loss(tmp_path):
    config = tiny_config(steps=6)
    mc = ModelConfig.from_config(config.model)
    models = {s: build_model(mc, rngs=nnx.Rngs(s)) for s in (80, 90, 100)}
    for s, m in models.items():
        ckpt.save_model(tmp_path, m, config, step=s)
    last = ckpt.load_model(tmp_path, 100)[0]
    avg, use = vl.averaged_model(last, str(tmp_path), 100, fraction=0.15)
    assert use == [90, 100]
    want = jax.tree.map(lambda a, b: (a + b) / 2, nnx.state(models[90], nnx.Param),
                        nnx.state(models[100], nnx.Param))
    for got, ref in zip(jax.tree.leaves(nnx.state(avg, nnx.Param)), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-6, atol=1e-7)
    vocab = data.get_vocabulary(config.data)
    out = vl.averaged_validation_loss(last, config, vocab, str(tmp_path), 100, num_batches=1, fraction=0.15)
    assert out["avg_steps"] == 2 and out["avg_from"] == 90
    assert out["val_loss"] == pytest.approx(vl.validation_loss(avg, config, vocab, 1)["val_loss"], rel=1e-6)
    first = ckpt.load_model(tmp_path, 80)[0]
    single = vl.averaged_validation_loss(first, config, vocab, str(tmp_path), 80, num_batches=1, fraction=0.15)
    assert single["avg_steps"] == 1
    assert single["val_loss"] == vl.validation_loss(first, config, vocab, 1)["val_loss"]  # = raw

    # scoring the same arrays twice reuses the result; new weights in the same model are scored anew
    before = vl.validation_loss(first, config, vocab, 1)["val_loss"]
    nnx.update(first, nnx.state(models[90], nnx.Param))
    after = vl.validation_loss(first, config, vocab, 1)["val_loss"]
    assert after != before
    assert after == pytest.approx(vl.validation_loss(models[90], config, vocab, 1)["val_loss"], rel=1e-6)
