"""A prediction beyond a finished scaling study's ladder (kind "predict"): N_opt and its loss at a
compute beyond the ladder's largest run, with intervals, then N_opt and a neighbour on each side
trained at that compute, predicted against actual.

Modules: ladder (the finished study: its preset, runs, laws' inputs, the sizes of its shape),
top_up (the ladder completed with the replicate runs study.replicates asks for and it lacks),
protocol (a rung's run config under the ladder's protocol and learning-rate rule), forecast (the
prediction, written before anything trains), outcome (actual losses, prediction.csv, verdicts),
figure (prediction.png), report (report.md), experiment (the kind's steps).
"""

from linscale_jax.study import experiments
from linscale_jax.study.predict import experiment

experiments.register(experiments.Experiment(
    kind=experiments.Kind.PREDICT, plan=experiment.plan, process=experiment.process_run, join=experiment.join,
    report=experiment.report, dry_run=experiment.dry_run, staged=True))
