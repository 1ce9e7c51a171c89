"""The fit library: a training-curve table in, fitted scaling laws out; writes nothing unless asked.

    from linscale_jax.fit import FitOptions, fit_table
    result = fit_table("runs.csv", FitOptions(approach=1, compute_unit="pf-days", bootstrap=200))
    result.fits            # {arch: fits.json entry}   (layout: linscale_jax/fit/report.py)
    print(result.summary())
    result.write("fits/")  # fits.json + curves.png, allocation.png, paper_overlay.png (+ isoflop.png)

``python -m linscale_jax.fit`` (linscale_jax/fit/cli.py) parses flags into a FitOptions and calls this; the study does the same.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from pathlib import Path
from typing import Callable

import numpy as np

from linscale_jax.contract import FITS_JSON
from linscale_jax.fit import approach1, approach2, approach3, report
from linscale_jax.fit.bootstrap import bootstrap
from linscale_jax.fit.table import FitError, Table, compute_scale, load
from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN


@dataclasses.dataclass(frozen=True)
class FitOptions:
    """How to fit. ``archs=None``: every arch in the table; ``bootstrap=0``: no intervals."""

    approach: int = 1  # 1: envelope (the paper's), 2: IsoFLOP parabolas, 3: parametric L(N, D)
    compute_unit: str = "flops"  # unit of C in the laws: flops | pf-days
    bootstrap: int = 200  # resamples of whole runs for the 95% intervals
    seed: int = 0
    archs: tuple[str, ...] | None = None
    irreducible: bool = False  # approaches 1, 2: L(C) = E + c C^e
    include_clamped: bool = False  # approach 1: keep ranges where the smallest/largest run is optimal
    flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN  # approach 3: k in C = k N D

    def __post_init__(self):
        if self.approach not in (1, 2, 3):
            raise FitError(f"approach must be 1, 2 or 3, got {self.approach!r}")
        compute_scale(self.compute_unit)  # validates the unit
        if self.archs is not None:
            object.__setattr__(self, "archs", tuple(self.archs))


@dataclasses.dataclass
class FitResult:
    """Per arch: the fits.json entry, the approach's result object and the table it was fitted on
    (C in the output unit), in fitting order."""

    options: FitOptions
    fits: dict  # {arch: fits.json entry}
    results: dict  # {arch: approach{1,2,3}.Result}
    tables: dict  # {arch: Table}

    def summary(self) -> str:
        return report.summary(self.fits)

    def write(self, out: str | Path) -> list[Path]:
        """out/fits.json and the PNGs; returns the paths written (fits.json first)."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / FITS_JSON).write_text(json.dumps(self.fits, indent=2) + "\n")
        from linscale_jax.fit import plots  # matplotlib (Agg) only when PNGs are written: importing fit
        #                        leaves a notebook's inline backend alone

        pngs = plots.write_all(out, self.tables, self.results, self.options.compute_unit)
        return [out / FITS_JSON, *pngs]


def fit_arch(table: Table, options: FitOptions = FitOptions()):
    """(point estimate, function that refits a resampled table) for one arch's table, whose compute
    is already in ``options.compute_unit`` for approaches 1 and 2 (approach 3 fits N and D and
    rescales the implied laws)."""
    o = options
    if o.approach == 1:
        def fn(t):
            return approach1.fit(t, irreducible=o.irreducible, include_clamped=o.include_clamped)
    elif o.approach == 2:
        def fn(t):
            return approach2.fit(t, irreducible=o.irreducible)
    else:
        scale = compute_scale(o.compute_unit)

        def fn(t, init=None):
            r = approach3.fit(t, flops_per_param_token=o.flops_per_param_token, init=init)
            laws = {k: law.scaled_input(scale) for k, law in r.laws.items()}
            return dataclasses.replace(r, laws=laws)
    point = fn(table)
    if o.approach == 3:  # resamples start from the point estimate (one L-BFGS run each)
        return point, lambda t: fn(t, init=point.theta).params()
    return point, lambda t: fn(t).params()


def fit_table(table: Table | str | Path, options: FitOptions = FitOptions(),
              log: Callable[[str], None] | None = None) -> FitResult:
    """Fit every arch of ``table`` (a Table, or a path `fit.table.load` reads; compute in FLOPs).
    ``log`` gets progress lines (default: silent). Raises FitError on a table that cannot be fitted."""
    log = log or (lambda line: None)
    o = options
    source = table if isinstance(table, (str, Path)) else table.source
    table = load(table) if isinstance(table, (str, Path)) else table
    archs = list(o.archs or table.archs)
    unknown = sorted(set(archs) - set(table.archs))
    if unknown:
        raise FitError(f"arch(s) {', '.join(unknown)} not in {source}; it has "
                       f"{', '.join(table.archs)}")
    # Approaches 1 and 2 work on C in the output unit; approach 3 on N and D (laws rescaled).
    fit_tab = table if o.approach == 3 else table.with_compute_unit(o.compute_unit)
    result = FitResult(o, {}, {}, {})
    for arch in archs:
        sub = fit_tab.select(arch)
        log(f"[fit] {arch}: {len(set(sub.run.tolist()))} runs, {len(sub)} points, "
            f"approach {o.approach}")
        point, refit = fit_arch(sub, o)
        boot = None
        if o.bootstrap:
            # Per-arch stream, independent of which other archs are fitted.
            arch_seed = int(np.random.SeedSequence([o.seed, zlib.crc32(arch.encode())])
                            .generate_state(1)[0])
            boot = bootstrap(sub, refit, o.bootstrap, seed=arch_seed,
                             progress=lambda line, a=arch: log(f"[fit] {a}: {line}"))
            log(f"[fit] {arch}: {o.bootstrap} bootstrap resamples ({boot.n_failed} failed)")
        result.fits[arch] = report.entry(point, o.compute_unit, boot, o.seed)
        result.results[arch] = point
        result.tables[arch] = sub.with_compute_unit(o.compute_unit) if o.approach == 3 else sub
    return result
