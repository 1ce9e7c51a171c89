"""Experiments on the models: one command from the corpus to a report (`python -m linscale_jax.study`).

A preset declares its kind; each kind is one folder registered in `experiments` (scaling, tune,
recall, noise, calibrate) with the same four steps: plan its runs, process one run, join, report.
`executor` processes a list of runs on one backend (this process, the local pool of `workers`, or
Ray through `ray_backend`) with one outcome per run and one stop or failure line; `backends` holds
what the pool and Ray share. `presets` has the shared defaults of the scaling and tune presets. The
command line is `__main__` (the experiment run, and the `verdicts` and `side_by_side` subcommands).
"""
