"""How often study.verdicts' finding-2 comparison gives each outcome on tables with a known answer.

    python bench/verdict_calibration.py [--seeds=100] [--bootstrap=200] [--margin=0.05]

Synthetic studies (fit.synthetic_study: the cpu preset's 5 sizes, one law, a per-run seed offset
and independent per-checkpoint errors, replicate seeds as listed) with two archs,
llama (the baseline) and tnl: "null" where both follow the same law, "0.1 nats" where tnl is 0.1
nats lower everywhere. Each noise row is one loss estimator's noise as measured by
`python -m study.noise` (llama-d32, 32 validation batches). Prints, per (noise, case), the share
of seeds giving better / worse / equivalent / not_resolved. Targets: false resolved (better + worse) <= 10% in the null case, resolved (better)
>= 80% at 0.1 nats.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (name, checkpoints per run, per-checkpoint sd, per-run sd, replicate seeds {size index: runs}): the
# estimators' noise (llama-d32, 32 validation batches) and the study's replicate designs
NOISE = (("cooldown, 3 points per run, 2 seeds of the smallest size (the cpu preset)", 3, 0.014, 0.025, {0: 2}),
         ("cooldown, 3 points per run, 2 seeds of the smallest and the largest size", 3, 0.014, 0.025, {0: 2, 4: 2}),
         ("val_loss, 16 points per run, 2 seeds of the smallest size (the cpu preset)", 16, 0.044, 0.055, {0: 2}))
CASES = (("null", 0.0), ("0.1 nats", -0.1))


def rates(points: int, ckpt_sd: float, run_sd: float, offset: float, seeds: int, n_boot: int,
          margin: float, replicates=None) -> dict:
    from fit.synthetic_study import study_table
    from study import verdicts

    counts = dict.fromkeys(verdicts.OUTCOMES, 0)
    for s in range(seeds):
        t = study_table({"llama": 0.0, "tnl": offset}, points=points, ckpt_sd=ckpt_sd, run_sd=run_sd,
                        replicates={0: 2} if replicates is None else replicates, seed=s)
        r = verdicts.judge(t, margin=margin, n_boot=n_boot, seed=s, holdout=False, linear=("tnl",))
        counts[r["equal_compute"]["archs"]["tnl"]["verdict"]] += 1
    return {k: v / seeds for k, v in counts.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="bench/verdict_calibration.py", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=100)
    p.add_argument("--bootstrap", type=int, default=200)
    p.add_argument("--margin", type=float, default=0.05)
    a = p.parse_args(argv)
    t0 = time.time()
    print(f"{a.seeds} synthetic studies per row, {a.bootstrap} resamples each, margin ±{a.margin:g} nats\n")
    print("| design (estimator, noise) | case | better | worse | equivalent | not_resolved | target |")
    print("|---|---|---|---|---|---|---|")
    for name, points, ck, run, reps in NOISE:
        for case, off in CASES:
            r = rates(points, ck, run, off, a.seeds, a.bootstrap, a.margin, reps)
            target = (f"false resolved {r['better'] + r['worse']:.0%} (<= 10%)" if off == 0 else
                      f"resolved {r['better']:.0%} (>= 80%)")
            print(f"| {name}; ckpt sd {ck:g}, run sd {run:g} | {case} | {r['better']:.0%} | {r['worse']:.0%} | "
                  f"{r['equivalent']:.0%} | {r['not_resolved']:.0%} | {target} |", flush=True)
    print(f"\n{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
