"""The scaling study (kind "scaling"): archs × sizes on one token budget, every checkpoint
evaluated, laws fitted, the paper's findings judged and rendered in DIR/report.md.

Modules: plan (the runs of a preset), runner (its steps: plan, process one run, join, report),
cooldown (cooldown branches), holdout (the largest size predicted from the others), compare
(smoothness, retrieval probes), verdicts (the findings judged with paired draws; also
`python -m linscale_jax.study verdicts`), findings (their text), results (every result computed
once, as data), report (report.md rendered from those files), side_by_side (finished studies
compared: `python -m linscale_jax.study side_by_side`).
"""

from linscale_jax.study import experiments
from linscale_jax.study.scaling import runner

experiments.register(experiments.Experiment(
    kind=experiments.Kind.SCALING, plan=runner.plan, process=runner.process_run, join=runner.join,
    report=runner.report, start=runner.start, dry_run=runner.dry_run))
