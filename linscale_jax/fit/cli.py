"""Command line: fit scaling laws to a training-curve table and write fits.json plus PNG plots.

    python -m linscale_jax.fit --table=runs.csv --approach=1 --out=fits/ [--compute_unit=pf-days]
                  [--bootstrap=200] [--seed=0] [--arch=tnl --arch=llama] [--irreducible]
                  [--include_clamped] [--flops_per_param_token=6]

``--table``: CSV / JSONL with columns arch, run, step, n_params, tokens, flops, loss, or a folder
of trainer workdirs (each with metrics.jsonl, plus run.json {"arch", "n_params"} unless the
checkpoints carry that metadata). Compute in the input is FLOPs. The work is fit.api.fit_table.
"""

from __future__ import annotations

import argparse
import sys

from linscale_jax.fit.api import FitOptions, FitResult, fit_table
from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN
from linscale_jax.fit.table import FitError
from linscale_jax.errors import ArgumentParser


def parse_args(argv=None) -> argparse.Namespace:
    p = ArgumentParser(prog="python -m linscale_jax.fit", description=__doc__.split("\n")[0])
    p.add_argument("--table", required=True, help="CSV, JSONL, or a folder of trainer workdirs")
    p.add_argument("--approach", type=int, choices=(1, 2, 3), required=True,
                   help="1: envelope (the paper's), 2: IsoFLOP parabolas, 3: parametric L(N, D)")
    p.add_argument("--out", required=True, help="output folder for fits.json and the PNGs")
    p.add_argument("--compute_unit", choices=("flops", "pf-days"), default="flops",
                   help="unit of C in the fitted laws (1 PF-day = 8.64e19 FLOPs)")
    p.add_argument("--bootstrap", type=int, default=200,
                   help="resamples of whole runs for the 95%% intervals (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arch", action="append", help="fit only these archs (repeatable)")
    p.add_argument("--irreducible", action="store_true",
                   help="approaches 1 and 2: fit L(C) = E + c C^e instead of a pure power law")
    p.add_argument("--include_clamped", action="store_true",
                   help="approach 1: keep compute ranges where the smallest/largest run is optimal")
    p.add_argument("--flops_per_param_token", type=float, default=FLOPS_PER_PARAM_TOKEN,
                   help="approach 3: k in C = k N D for the implied allocation")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> FitResult:
    """``python -m linscale_jax.fit`` on parsed arguments: fit, write ``--out``, print the summary."""
    options = FitOptions(approach=args.approach, compute_unit=args.compute_unit,
                         bootstrap=args.bootstrap, seed=args.seed, archs=args.arch,
                         irreducible=args.irreducible, include_clamped=args.include_clamped,
                         flops_per_param_token=args.flops_per_param_token)
    result = fit_table(args.table, options, log=lambda line: print(line, flush=True))
    fits_json, *pngs = result.write(args.out)
    print(result.summary())
    print(f"[fit] wrote {fits_json} and {', '.join(p.name for p in pngs)}", flush=True)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except FitError as e:
        print(f"ERROR: {e}", file=sys.stderr, flush=True)
        return 1
    return 0
