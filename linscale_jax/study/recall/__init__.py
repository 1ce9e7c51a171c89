"""Miniature retrieval (kind "recall"): MQAR accuracy of every architecture against the size of
its decoding state.

Modules: experiment (its steps: plan, finished, join, report), train (the runs and one run),
table (statuses, recall.csv, the positive control, what a verdict may use), verdicts (each label
against the control at equal steps), rates (the learning-rate file), report (recall.png, the
report's section).
"""

from linscale_jax.study import experiments
from linscale_jax.study.recall import experiment, train
from linscale_jax.study.recall.report import SECTION, update_report
from linscale_jax.study.recall.table import (COLUMNS, STATUSES, Status, control, control_sentence, read_csv,
                                              verdict_input, wilson)

__all__ = ["COLUMNS", "SECTION", "STATUSES", "Status", "control", "control_sentence", "read_csv", "update_report",
           "verdict_input", "wilson"]

experiments.register(experiments.Experiment(
    kind=experiments.Kind.RECALL, plan=experiment.plan, process=train.process_run, join=experiment.join,
    report=experiment.report, finished=experiment.finished))
