"""Noise measurement pieces: the cooldown branch (schedule and resume from the run's checkpoint), the
sample-size and checkpoint-noise statistics, on tiny inputs."""

import json

import numpy as np
import pytest
from train_helpers import tiny_config

from linscale_jax.run import checkpoint as ckpt
from linscale_jax.train import optim
from linscale_jax.train import loop as trainer
from study import compare, cooldown, noise


def test_cooldown_schedule_continues_the_constant_rate_then_decays_to_zero():
    c = tiny_config(steps=100)
    cfg = cooldown.cooldown_config(c, 80, 0.25)
    assert cfg.train.steps == 100 and c.train.steps == 100  # the run's config is not modified
    sched = optim.make_schedule(cfg.optim, int(cfg.train.steps))
    base = optim.make_schedule(c.optim, 100)
    assert all(float(sched(s)) == pytest.approx(float(base(s))) for s in range(0, 81))
    assert float(sched(90)) == pytest.approx(0.5 * c.optim.lr) and float(sched(100)) == pytest.approx(0.0)
    c.optim.schedule = "cosine"
    with pytest.raises(ValueError, match="constant-rate"):
        cooldown.cooldown_config(c, 80, 0.25)
    with pytest.raises(ValueError, match="fraction"):
        cooldown.cooldown_steps(80, 0.0)


def test_cooldown_branch_resumes_from_the_runs_checkpoint(tmp_path):
    c = tiny_config(steps=4)
    c.checkpoint.every_steps = 2
    run = tmp_path / "run"
    trainer.train(c, run)
    out = cooldown.cooldown(c, str(run), 4, 0.5, str(tmp_path / "cool"))
    assert ckpt.list_steps(out) == [4, 6] and ckpt.list_steps(run) == [2, 4]
    rows = [json.loads(x) for x in (tmp_path / "cool" / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in rows if "lr" in r]
    assert [r["step"] for r in rows if "lr" in r] == [5, 6] and lrs[0] > lrs[1] >= 0  # resumed at 4, decaying
    with pytest.raises(FileNotFoundError, match="no complete checkpoint at step 3"):
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
