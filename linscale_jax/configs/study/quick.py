"""A quick check of the whole study pipeline on 2 CPU cores: 4 archs x d32, d48, d64 of the ladder,
48 steps of 8 x 128 byte tokens each.

    python -m linscale_jax.study --config=configs/study/quick.py --workdir=/tmp/study_quick
Three sizes cannot bracket an optimum, so the fit keeps clamped envelope points
(fit.include_clamped): the laws are a smoke test of the pipeline, not a measurement.
Cost: docs/results.md, "What the configs cost".
"""

from linscale_jax.study.presets import study_defaults


def get_config():
    c = study_defaults("scaling")
    c.sizes = "d32,d48,d64"
    c.tokens = 48 * 8 * 128.0
    c.checkpoints = 4
    c.workers = 2  # two runs at once, one per core (study.workers)
    c.overrides.train.log_every = 8
    # cooldowns branch off a constant rate; one rate for every size (a smoke test of the pipeline)
    c.overrides.optim.update(warmup_steps=8, schedule="constant", rule="paper")
    c.overrides.checkpoint.log_spaced = 2
    c.eval.update(val_batches=1, niah_grid="3x3", probe_items=16)
    c.estimators = "val_loss,cooldown"
    c.replicates.update(sizes="smallest", seeds=1)
    c.noise.seed_sd = 0.05  # assumed only for an arch without replicates
    c.eval.final_runs = "largest"  # NIAH + probe on each arch's largest model only
    c.fit.update(bootstrap=50, include_clamped=True)
    return c
