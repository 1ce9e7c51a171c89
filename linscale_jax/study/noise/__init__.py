"""The noise sources of a loss point (kind "noise"): seeds of one small size, every checkpoint
evaluated raw, weight-averaged and cooled down, on validation samples of several sizes.

Module: measure (its steps: plan one run per seed, process one, join the statistics, report).
"""

from linscale_jax.study import experiments
from linscale_jax.study.noise import measure

experiments.register(experiments.Experiment(
    kind=experiments.Kind.NOISE, plan=measure.plan, process=measure.process_run, join=measure.join,
    report=measure.report, finished=measure.finished))
