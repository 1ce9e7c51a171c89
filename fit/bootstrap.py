"""Bootstrap over whole runs: resample runs with replacement (a run keeps all its checkpoints).

Checkpoints of one run are strongly correlated, so resampling them individually would understate
the uncertainty; the unit of resampling is the run. Intervals are 95% percentile intervals.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from fit.table import FitError, Table


@dataclasses.dataclass(frozen=True)
class Bootstrap:
    samples: dict[str, np.ndarray]  # parameter -> [n_ok] values
    n_requested: int
    n_failed: int
    first_error: str | None

    def ci95(self) -> dict[str, list[float]]:
        return {k: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))]
                for k, v in self.samples.items()}

    def se(self) -> dict[str, float]:
        return {k: float(np.std(v, ddof=1)) for k, v in self.samples.items()}


def resample_runs(table: Table, rng: np.random.Generator) -> Table:
    """A table of len(runs) runs drawn with replacement; repeated draws get distinct run names."""
    names = sorted(set(table.run.tolist()))
    rows = {name: np.flatnonzero(table.run == name) for name in names}
    picks = rng.integers(0, len(names), size=len(names))
    index = np.concatenate([rows[names[p]] for p in picks])
    labels = np.concatenate([[f"{names[p]}#{j}"] * len(rows[names[p]])
                             for j, p in enumerate(picks)])
    out = table.take(index)
    return dataclasses.replace(out, run=labels.astype(object))


def bootstrap(table: Table, fit_fn: Callable[[Table], dict[str, float]], n: int,
              seed: int = 0, progress: Callable[[str], None] | None = None,
              max_failed: float = 0.5) -> Bootstrap:
    """Refit ``fit_fn`` (table -> flat parameter dict) on ``n`` run-resampled tables.

    Resamples on which the fit fails (e.g. no size left that brackets the optimum) are counted in
    ``n_failed`` and left out; more than ``max_failed`` of them failing is an error. ``progress`` receives a line
    with the count and ETA about every tenth of the way.
    """
    if n < 2:
        raise FitError(f"bootstrap needs at least 2 resamples, got {n}; use --bootstrap 0 to skip")
    rng = np.random.default_rng(seed)
    values: dict[str, list[float]] = {}
    failed, first_error = 0, None
    start = time.monotonic()
    for i in range(n):
        if progress and i and i % max(1, n // 10) == 0:
            spent = time.monotonic() - start
            progress(f"bootstrap {i}/{n} resamples, {spent:.0f}s, ETA {spent * (n - i) / i:.0f}s")
        try:
            params = fit_fn(resample_runs(table, rng))
        except FitError as e:
            failed += 1
            first_error = first_error or str(e)
            continue
        for k, v in params.items():
            values.setdefault(k, []).append(v)
    if failed > int(n * max_failed):
        raise FitError(f"{failed} of {n} bootstrap resamples could not be fitted (first: "
                       f"{first_error}); add runs so a resample still brackets the optimum, or "
                       "use --bootstrap 0")
    return Bootstrap({k: np.asarray(v) for k, v in values.items()}, n, failed, first_error)
