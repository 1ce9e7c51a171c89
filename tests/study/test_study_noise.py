"""Noise measurement pieces: the cooldown branch (schedule and resume from the run's checkpoint), the
sample-size and checkpoint-noise statistics, on tiny inputs; the noise kind run end to end, shrunk."""

import json

import numpy as np
import pytest
from helpers.train import tiny_config

from linscale_jax.run import checkpoint as ckpt
from linscale_jax.train import loop as trainer
from linscale_jax.study.scaling import compare, cooldown
from linscale_jax.study.noise import measure as noise


def test_cooldown_shapes_and_branch_points():
    f = cooldown.lr_factors(4, "linear")
    assert list(f) == [1.0, 0.75, 0.5, 0.25]
    g = cooldown.lr_factors(4, "1-sqrt")
    assert g[0] == 1.0 and np.all(np.diff(g) < 0) and np.all(g < 1 - np.arange(4) / 4 + 1e-12)
    with pytest.raises(ValueError, match="shape"):
        cooldown.lr_factors(4, "cosine")
    with pytest.raises(ValueError, match="fraction"):
        cooldown.cooldown_steps(80, 0.0)
    c = tiny_config(steps=2048)
    c.optim.warmup_steps = 64
    c.checkpoint.every_steps = 128
    assert cooldown.branch_steps(c, 3) == [512, 1024, 2048]
    assert cooldown.branch_steps(c, 6) == [128, 256, 512, 1024, 2048]  # 64 is inside the warmup


def test_cooldown_branch_is_the_decayed_schedule_with_the_runs_own_step(tmp_path):
    """The branch (the run's compiled constant-rate step, each update scaled) equals training on from
    the checkpoint with the wsd schedule decaying linearly to 0 over the same steps."""
    import shutil

    c = tiny_config(steps=4)
    c.checkpoint.every_steps = 2
    run = tmp_path / "run"
    trainer.train(c, run)
    out = cooldown.cooldown(c, str(run), 4, 1.0, str(tmp_path / "cool"), shape="linear")
    assert ckpt.list_steps(out) == [8] and ckpt.list_steps(run) == [2, 4]
    assert ckpt.load_metadata(out, 8)["cooldown_from"] == 4
    ref = tmp_path / "ref"
    shutil.copytree(ckpt.ckpt_dir(run) / "4", ckpt.ckpt_dir(ref) / "4")
    w = tiny_config(steps=8)
    w.optim.update(schedule="wsd", decay_fraction=0.5, min_lr_ratio=0.0)
    w.checkpoint.every_steps = 0
    trainer.train(w, ref, allow_config_change=True)
    a = ckpt.load_model(out, 8)[0]
    b = ckpt.load_model(ref, 8)[0]
    from flax import nnx
    import jax

    for x, y in zip(jax.tree.leaves(nnx.state(a, nnx.Param)), jax.tree.leaves(nnx.state(b, nnx.Param))):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)
    before = ckpt.load_model(run, 4)[0]
    moved = [float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in
             zip(jax.tree.leaves(nnx.state(a, nnx.Param)), jax.tree.leaves(nnx.state(before, nnx.Param)))]
    assert max(moved) > 1e-4  # the branch trained
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        cooldown.cooldown(c, str(run), 3, 0.5, str(tmp_path / "bad"))


def test_noise_statistics():
    rng = np.random.default_rng(0)
    bl = np.stack([2.0 * 100 + rng.normal(0, 5, 64), np.full(64, 100.0)], axis=1)  # per-batch (nll, tokens)
    assert noise.loss_at(bl, 64) == pytest.approx(bl[:, 0].sum() / 6400)
    sd1, sd16 = noise.sample_sd(bl, 1), noise.sample_sd(bl, 16)
    assert 0.035 < sd1 < 0.065 and sd16 < sd1 / 2  # sd of the mean falls like 1/sqrt(v)
    assert np.isnan(noise.sample_sd(bl, 40))
    x = np.log(np.arange(1, 21) * 64.0)
    trend = 3.0 - 0.01 * x
    sd, rise = compare.residual_sd(x, trend[None] + rng.normal(0, 0.02, (3, 20)))
    assert 0.014 < sd < 0.028 and 0.3 < rise < 0.8
    assert compare.residual_sd(x, trend[None])[0] < 1e-9


@pytest.mark.slow  # two tiny seeds trained, evaluated, averaged and cooled down: about 45 s on 2 cores
def test_the_noise_kind_measures_every_estimator_and_resumes(tmp_path):
    """`python -m linscale_jax.study --config=noise` shrunk: two seeds of d32 on the quick preset, 8
    steps (its warmup: a cooldown branches off the constant rate after it), checkpoints at 4 and 8,
    one cooldown: noise.json has every estimator at both sample sizes; a second run processes nothing."""
    from linscale_jax.study import experiments
    from linscale_jax.study.presets import preset

    study = preset("noise")
    study.update(dict(preset="quick", size="d32", steps=8, every=4, seeds=2, val="1,2", cooldowns=1))
    out = experiments.run(study, str(tmp_path), log=lambda m: None)
    assert out["processed"] == 2
    got = json.loads((tmp_path / "noise.json").read_text())
    assert [r["estimator"] for r in got["rows"]] == ["raw@1", "raw@2", "avg@1", "avg@2", "cool@1", "cool@2"]
    assert all(np.isfinite(r["final_loss"]) and np.isfinite(r["seed_sd"]) for r in got["rows"])
    assert got["rows"][0]["final_step"] == 8 and got["rows"][-1]["final_step"] > 8  # the branch's own steps
    assert "| raw@1 |" in (tmp_path / "noise.md").read_text()
    assert experiments.run(study, str(tmp_path), log=lambda m: None)["processed"] == 0
