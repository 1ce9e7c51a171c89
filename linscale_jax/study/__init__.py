"""The miniature scaling study: one command from the corpus to fitted laws and a report.

Modules: plan (runs of a preset), runner (train, evaluate, join, fit; the corpus probe is eval.probe),
verdicts (the findings judged with paired draws), holdout (the largest size predicted from the
others), compare (smoothness, retrieval probes), results (every result computed once, as data),
report (report.md rendered from those files), calibrate (`python -m linscale_jax.study.calibrate`: the verdicts
on simulations of the study's design), noise + cooldown (`python -m linscale_jax.study.noise`: the noise sources
measured); CLI in __main__.
"""
