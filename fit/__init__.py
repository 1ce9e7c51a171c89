"""Scaling-law fitting: training-curve tables -> power laws (approaches 1, 2, 3), intervals, plots.

Modules: table (load / validate), powerlaw (log-space least squares), approach1 (envelope, the
paper's method), approach2 (IsoFLOP parabolas), approach3 (parametric L(N, D)), bootstrap (whole
runs), plots (PNGs), report (fits.json / summary), paper (the paper's Table 3), synthetic (planted
laws for tests), holdout (fit without the largest size, predict it), cli (``python -m fit``; the
library call ``cli.fit_table``).
"""

from fit.table import PF_DAY, FitError, Table, load

__all__ = ["PF_DAY", "FitError", "Table", "load"]
