"""The recall preset's learning-rate sweep: every arch label at 5 rates over 1e-4 ... 1e-2 at one
shape, one seed, 2,000 steps each; the rate kept per label has the best validation accuracy after
the preset's steps for that label (max_steps, the baseline's baseline_max_steps; read from the run's
validation history, every eval_every steps; study.recall.table.best_lr). The schedule is constant,
so a preset run repeats the first steps of the sweep run with its rate and seed.

    python -m linscale_jax.study --config=recall_sweep --workdir=DIR
    cp DIR/recall_rates.json linscale_jax/configs/study/recall_rates.json   # the rates the preset reads

Writes DIR/recall_rates.json (rates, the sweep's accuracies and steps, command, machine) beside
the recall study's outputs. Cost: docs/results.md "Recall (MQAR)".
"""

from linscale_jax.study.presets import preset


def get_config():
    c = preset("recall")
    c.update(dict(shapes="d64e16", seeds="0", lr="1e-4/3e-4/1e-3/3e-3/1e-2", sweep_steps=2000))
    return c
