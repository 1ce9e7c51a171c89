"""The verdicts on simulations of a finished scaling study's design (study.calibrate): --workdir is
that study's directory.

    python -m linscale_jax.study --config=calibrate --workdir=DIR
    python -m linscale_jax.study --config=calibrate --workdir=DIR \
        --config.replicate_sizes=smallest,largest --config.replicate_seeds=2   # another replicate design
    python -m linscale_jax.study --config=calibrate --workdir=DIR \
        --config.true_seed_sd=d16l2=0.021,d16=0.021,d32l2=0.008,d32=0.008,d48=0.008  # another true seed sd

Writes DIR/calibration.json and renders DIR/report.md again. Figures: docs/results.md.
"""

import ml_collections


def get_config():
    return ml_collections.ConfigDict(dict(
        kind="calibrate",
        seeds=100,  # simulated studies per case
        effect=0.1,  # nats: the planted difference
        bootstrap=0,  # draws per verdict (0: the study's)
        replicate_sizes="",  # e.g. "smallest,largest": simulate that replicate design and its cost
        replicate_seeds=1,  # replicate seeds per named size
        true_seed_sd="",  # the simulated true seed sd: "" the study's measured one, or 0.016, or SIZE=SD,...
        workers=2,  # cases at once
    ))
