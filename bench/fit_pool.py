"""A law's bootstrap refits on every core (fit.pool) against the same refits one by one, side by side.

    python bench/fit_pool.py [--table=DIR/fit/table.csv] [--n_boot=200] [--json]

Per arch of the table (default: a planted law on 5 sizes x 12 checkpoints, noise 0.01), what a
study's report does for each law it draws: fit.holdout.law_draws, once in this process
(fit.pool.cores() forced to 1) and once on the pool of every core, from the same seed. Prints both
wall times, their ratio and whether the two LawDraws are identical (thetas, sigma draws, failure
share); the pool's start (fresh interpreters, once per process) is timed on its own line and left
out of the ratio, as a study's report pays it once for its dozens of law_draws calls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> None:
    from linscale_jax.fit import bootstrap as bs
    from linscale_jax.fit import holdout, pool
    from linscale_jax.fit import table as tables
    from linscale_jax.fit.synthetic import Law, planted_table

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", default="", help="a study's fit/table.csv (default: a planted law)")
    p.add_argument("--n_boot", type=int, default=200)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.table:
        full = tables.load(a.table)
        by_arch = {str(x): full.take(full.arch == x) for x in np.unique(full.arch)}
    else:
        by_arch = {"planted": planted_table(Law(), sizes=np.geomspace(1e6, 1e8, 5), points_per_run=12,
                                            noise=0.01, seed=0)}
    cores = pool.cores()
    started = time.perf_counter()
    pool.map_ordered(abs, list(range(pool.MIN_ITEMS)))  # start the pool's interpreters
    start_s = time.perf_counter() - started
    rows = []
    real_cores = pool.cores
    for arch, t in by_arch.items():
        curves = bs.curves_of(t)
        sd = bs.seed_sd_of(curves)
        sd = sd if sd.df else bs.SeedSd(0.01, 8, "assumed")
        out = {}
        try:
            for name, n in (("one_by_one", 1), ("pool", cores)):
                pool.cores = lambda n=n: n  # law_draws asks fit.pool how many cores it may use
                t0 = time.perf_counter()
                out[name] = holdout.law_draws(curves, arch, np.random.default_rng(0), n_boot=a.n_boot, seed_sd=sd)
                out[name + "_s"] = time.perf_counter() - t0
        finally:
            pool.cores = real_cores
        same = (np.array_equal(out["pool"].thetas, out["one_by_one"].thetas)
                and np.array_equal(out["pool"].sigma, out["one_by_one"].sigma)
                and out["pool"].failed == out["one_by_one"].failed)
        rows.append(dict(arch=arch, n_boot=a.n_boot, cores=cores, one_by_one_s=round(out["one_by_one_s"], 2),
                         pool_s=round(out["pool_s"], 2), speedup=round(out["one_by_one_s"] / out["pool_s"], 2),
                         identical=bool(same)))
    pool.shutdown()
    if a.json:
        print(json.dumps({"pool_start_s": round(start_s, 2), "rows": rows}))
        return
    print(f"pool of {cores} interpreters started in {start_s:.2f} s (once per process)")
    print(f"{'arch':12s} {'refits':>6s} {'one by one':>11s} {'pool':>8s} {'speedup':>8s} identical")
    for r in rows:
        print(f"{r['arch']:12s} {r['n_boot']:6d} {r['one_by_one_s']:10.2f}s {r['pool_s']:7.2f}s "
              f"{r['speedup']:7.2f}x {r['identical']}")


if __name__ == "__main__":
    main()
