"""The miniature scaling study: one command from the corpus to fitted laws and a report.

Modules: plan (runs of a preset), runner (train, evaluate, join, fit), probe (the line probe),
compare (comparisons with intervals), report (report.md); CLI in __main__.
"""
