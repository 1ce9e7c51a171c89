"""Command line: fit scaling laws to a training-curve table and write fits.json plus PNG plots.

    python -m fit --table runs.csv --approach 1 --out fits/ [--compute-unit pf-days]
                  [--bootstrap 200] [--seed 0] [--arch tnl --arch llama] [--irreducible]
                  [--include-clamped] [--flops-per-param-token 6]

``--table``: CSV / JSONL with columns arch, run, step, n_params, tokens, flops, loss, or a folder
of trainer workdirs (each with metrics.jsonl, plus run.json {"arch", "n_params"} unless the
checkpoints carry that metadata). Compute in the input is FLOPs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import zlib
from pathlib import Path
from typing import Callable

import numpy as np

from fit import approach1, approach2, approach3, plots, report
from fit.bootstrap import bootstrap
from fit.table import FitError, Table, compute_scale, load


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fit", description=__doc__.split("\n")[0])
    p.add_argument("--table", required=True, help="CSV, JSONL, or a folder of trainer workdirs")
    p.add_argument("--approach", type=int, choices=(1, 2, 3), required=True,
                   help="1: envelope (the paper's), 2: IsoFLOP parabolas, 3: parametric L(N, D)")
    p.add_argument("--out", required=True, help="output folder for fits.json and the PNGs")
    p.add_argument("--compute-unit", choices=("flops", "pf-days"), default="flops",
                   help="unit of C in the fitted laws (1 PF-day = 8.64e19 FLOPs)")
    p.add_argument("--bootstrap", type=int, default=200,
                   help="resamples of whole runs for the 95%% intervals (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arch", action="append", help="fit only these archs (repeatable)")
    p.add_argument("--irreducible", action="store_true",
                   help="approaches 1 and 2: fit L(C) = E + c C^e instead of a pure power law")
    p.add_argument("--include-clamped", action="store_true",
                   help="approach 1: keep compute ranges where the smallest/largest run is optimal")
    p.add_argument("--flops-per-param-token", type=float, default=6.0,
                   help="approach 3: k in C = k N D for the implied allocation")
    return p.parse_args(argv)


def fit_arch(table, *, approach: int, unit_scale: float = 1.0, irreducible: bool = False,
             include_clamped: bool = False, flops_per_param_token: float = 6.0):
    """(point estimate, function that refits a resampled table) for one arch's table."""
    if approach == 1:
        def fn(t):
            return approach1.fit(t, irreducible=irreducible, include_clamped=include_clamped)
    elif approach == 2:
        def fn(t):
            return approach2.fit(t, irreducible=irreducible)
    else:
        def fn(t, init=None):
            r = approach3.fit(t, flops_per_param_token=flops_per_param_token, init=init)
            laws = {k: law.scaled_input(unit_scale) for k, law in r.laws.items()}
            return dataclasses.replace(r, laws=laws)
    point = fn(table)
    if approach == 3:  # resamples start from the point estimate (one L-BFGS run each)
        return point, lambda t: fn(t, init=point.theta).params()
    return point, lambda t: fn(t).params()


def fit_table(table: Table | str | Path, out: str | Path, *, approach: int = 1,
              compute_unit: str = "flops", bootstrap_n: int = 200, seed: int = 0,
              archs: list[str] | None = None, irreducible: bool = False,
              include_clamped: bool = False, flops_per_param_token: float = 6.0,
              log: Callable[[str], None] = print) -> dict:
    """Fit every arch of ``table`` (a Table or a path `load` reads), write out/fits.json and the
    PNGs, and return the fits.json dict {arch: entry}. The library form of ``python -m fit``."""
    if approach not in (1, 2, 3):
        raise FitError(f"approach must be 1, 2 or 3, got {approach!r}")
    scale = compute_scale(compute_unit)
    source = table if isinstance(table, (str, Path)) else table.source
    table = load(table) if isinstance(table, (str, Path)) else table
    archs = list(archs or table.archs)
    unknown = sorted(set(archs) - set(table.archs))
    if unknown:
        raise FitError(f"arch(s) {', '.join(unknown)} not in {source}; it has "
                       f"{', '.join(table.archs)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # Approaches 1 and 2 work on C in the output unit; approach 3 on N and D (laws rescaled).
    fit_tab = table if approach == 3 else table.with_compute_unit(compute_unit)
    fits, results, tables = {}, {}, {}
    for arch in archs:
        sub = fit_tab.select(arch)
        log(f"[fit] {arch}: {len(set(sub.run.tolist()))} runs, {len(sub)} points, "
            f"approach {approach}")
        point, refit = fit_arch(sub, approach=approach, unit_scale=scale, irreducible=irreducible,
                                include_clamped=include_clamped,
                                flops_per_param_token=flops_per_param_token)
        boot = None
        if bootstrap_n:
            # Per-arch stream, independent of which other archs are fitted.
            arch_seed = int(np.random.SeedSequence([seed, zlib.crc32(arch.encode())])
                            .generate_state(1)[0])
            boot = bootstrap(sub, refit, bootstrap_n, seed=arch_seed,
                             progress=lambda line, a=arch: log(f"[fit] {a}: {line}"))
            log(f"[fit] {arch}: {bootstrap_n} bootstrap resamples ({boot.n_failed} failed)")
        fits[arch] = report.entry(point, compute_unit, boot, seed)
        results[arch] = point
        tables[arch] = sub.with_compute_unit(compute_unit) if approach == 3 else sub
    (out / "fits.json").write_text(json.dumps(fits, indent=2) + "\n")
    pngs = plots.write_all(out, tables, results, compute_unit)
    log(report.summary(fits))
    log(f"[fit] wrote {out / 'fits.json'} and {', '.join(p.name for p in pngs)}")
    return fits


def run(args: argparse.Namespace) -> dict:
    """``python -m fit`` on parsed arguments (see `fit_table`)."""
    return fit_table(args.table, args.out, approach=args.approach, compute_unit=args.compute_unit,
                     bootstrap_n=args.bootstrap, seed=args.seed, archs=args.arch,
                     irreducible=args.irreducible, include_clamped=args.include_clamped,
                     flops_per_param_token=args.flops_per_param_token,
                     log=lambda line: print(line, flush=True))


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except FitError as e:
        print(f"fit: error: {e}", file=sys.stderr)
        return 2
    return 0
