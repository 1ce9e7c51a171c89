"""Scaling-law fitting: training-curve tables -> power laws (approaches 1, 2, 3), intervals, plots.

Library: ``fit_table(table, FitOptions(...)) -> FitResult`` (linscale_jax/fit/api.py; writes nothing until
``result.write(out)``). Modules: table (load / validate), powerlaw (log-space least squares),
approach1 (envelope, the paper's method), approach2 (IsoFLOP parabolas), approach3 (parametric
L(N, D)), bootstrap (whole runs), plots (PNGs), report (fits.json / summary), paper (the paper's
Table 3), synthetic (planted laws for tests), holdout (fit without the largest size, predict it;
the law's refits on draws with the sizes fixed, on every core: pool), backtest (fit the k smallest rungs, predict the
next, for every k), prediction (the law beyond the ladder: the best size and rung losses at a larger
compute), cli (``python -m linscale_jax.fit``: flags -> FitOptions -> fit_table -> write).
"""

from linscale_jax.fit.api import FitOptions, FitResult, fit_arch, fit_table
from linscale_jax.fit.table import PF_DAY, FitError, Table, load

__all__ = ["PF_DAY", "FitError", "FitOptions", "FitResult", "Table", "fit_arch", "fit_table", "load"]
