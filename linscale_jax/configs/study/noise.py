"""The noise sources of a loss point: 3 seeds of llama-d16 on the cpu preset's data and constant
learning rate, 384 steps, a checkpoint every 32, each scored raw, weight-averaged and cooled down
on 2, 8 and 32 validation batches (study.noise).

    python -m linscale_jax.study --config=noise --workdir=DIR
    python -m linscale_jax.study --config=noise --workdir=DIR --config.size=d32 --config.steps=1024 \
        --config.every=64 --config.val=2,8,32,128      # docs/results.md's measurement

Writes DIR/noise.json and DIR/noise.md. Figures: docs/results.md, "Noise".
"""

import ml_collections


def get_config():
    return ml_collections.ConfigDict(dict(
        kind="noise",
        preset="cpu",  # the study preset whose model file, data and (constant) learning rate the runs use
        arch="llama",
        size="d16",
        steps=384,
        every=32,  # steps between checkpoints
        seeds=3,
        val="2,8,32",  # validation sample sizes, in batches of the preset's batch x seq_len tokens
        cooldown=0.2,  # a cooldown branch's length / its step
        cooldowns=3,  # branches from this many last checkpoints
        average=0.25,  # avg@v: the mean weights of the checkpoints in this last fraction of the steps
        workers=1,  # runs (seeds) at once
    ))
