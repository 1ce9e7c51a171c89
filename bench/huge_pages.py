"""Train step with and without glibc's huge-page malloc (linscale_jax.parallel.host_memory), side by side.

    python bench/huge_pages.py [--archs=llama,tnl,hgrn2,cosformer2] [--size=d256] [--steps=8]
                               [--rounds=2] [--json]

glibc reads GLIBC_TUNABLES only at process start, so the two settings cannot share one process:
for every arch it runs `bench/train_step.py --json` in child processes with
`glibc.malloc.hugetlb=0` and `=1`, alternating, `--rounds` times each. It then prints the median
step time and the minor page faults per step of each setting, and the speed-up (4 KiB pages time
/ huge pages time). --json prints one object per arch: arch, size, step_ms_4k, step_ms_huge,
speedup, faults_4k, faults_huge.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(arch: str, size: str, steps: int, huge: bool) -> dict:
    env = dict(os.environ, GLIBC_TUNABLES=f"glibc.malloc.hugetlb={int(huge)}")
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "train_step.py"), "--json", f"--sizes={size}",
         f"--archs={arch}", f"--steps={steps}"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", default="llama,tnl,hgrn2,cosformer2")
    p.add_argument("--size", default="d256")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if not a.json:
        print(f"| arch | size | step ms, 4 KiB pages | step ms, huge pages | speed-up | "
              f"faults/step 4 KiB | faults/step huge |")
        print("|---|---|---|---|---|---|---|")
    for arch in a.archs.split(","):
        runs = {False: [], True: []}
        for _ in range(a.rounds):
            for huge in (False, True):
                runs[huge].append(one_run(arch, a.size, a.steps, huge))
        ms = {h: statistics.median(r["step_ms"] for r in runs[h]) for h in runs}
        faults = {h: statistics.median(r["page_faults_per_step"] for r in runs[h]) for h in runs}
        row = dict(arch=arch, size=a.size, step_ms_4k=round(ms[False], 1),
                   step_ms_huge=round(ms[True], 1), speedup=round(ms[False] / ms[True], 3),
                   faults_4k=round(faults[False]), faults_huge=round(faults[True]))
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"| {arch} | {a.size} | {row['step_ms_4k']} | {row['step_ms_huge']} | "
                  f"{row['speedup']:.2f}x | {row['faults_4k']:,} | {row['faults_huge']:,} |",
                  flush=True)


if __name__ == "__main__":
    main()
