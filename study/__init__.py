"""The miniature scaling study: one command from the corpus to fitted laws and a report.

Modules: plan (runs of a preset), runner (train, evaluate, join, fit; the corpus probe is eval.probe),
compare (comparisons with intervals), holdout (the largest size predicted from the others), report
(report.md), noise + cooldown (`python -m study.noise`: the noise sources measured);
CLI in __main__.
"""
