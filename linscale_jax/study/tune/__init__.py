"""The tuning grid (kind "tune"): peak learning rate, batch and AdamW β2 per ladder size, pruned in
stages, fitted as power laws in N (the tuned rule linscale_jax.train.rule reads).

Modules: experiment (its steps: plan the next stage, process one cell, join, report), grid (the
cells and the stages), fit (per-size optima and the power-law fits), outputs (DIR/tune/), plot.
"""

from linscale_jax.study import experiments
from linscale_jax.study.tune import experiment

experiments.register(experiments.Experiment(
    kind=experiments.Kind.TUNE, plan=experiment.plan, process=experiment.process_cell,
    join=experiment.join, report=experiment.report, dry_run=experiment.dry_run, staged=True))
