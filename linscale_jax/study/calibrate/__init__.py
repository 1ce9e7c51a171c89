"""The verdicts on simulations of a finished study's design (kind "calibrate"): how often each
finding-2 verdict comes out right when the truth is known.

Modules: simulate (the simulated tables, their verdicts counted, calibration.json), experiment (its
steps: one run per case, join, report).
"""

from linscale_jax.study import experiments
from linscale_jax.study.calibrate import experiment

experiments.register(experiments.Experiment(
    kind=experiments.Kind.CALIBRATE, plan=experiment.plan, process=experiment.process_case,
    join=experiment.join, report=experiment.report, finished=experiment.finished))
