"""A run's train step with XLA:CPU's YNNPACK fusions (XLA's default) and without them
(linscale_jax.parallel.cpu_codegen, what the entry points set), side by side.

    python bench/xla_fusions.py [--config=cpu] [--runs=llama-d32l2,...,cosformer2-d96l2]
                                [--steps=200] [--rounds=2] [--json]

XLA reads its flags once per process, so each setting runs in child processes (this script
with --setting): the run's own train step (bench/stacked_runs.py's, k = 1) on one pinned core,
single-threaded XLA, as a study worker runs it; median CPU ms per step over 3 bursts of --steps.
One child has `--xla_cpu_experimental_ynn_fusion_type=+dot` (XLA's default set: dot is one of its
types), the other `--xla_cpu_experimental_ynn_fusion_type=` (none). The two run at the same time,
one on each of cores 0 and 1 (as the study's two workers run), swapped each round, --rounds
rounds: both settings see the machine at the same moment, whose speed drifts over minutes. Prints
the median of each setting's rounds and the speed-up (YNNPACK ms / XLA's own ms: > 1, XLA's own
fusions are faster). --json prints one object per run: run, ynn_ms, xla_ms, speedup.
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
sys.path.insert(0, str(ROOT))

from linscale_jax.parallel.cpu_codegen import FLAG, OPTION  # noqa: E402

SETTINGS = {"ynn": f"--{OPTION}=+dot", "xla": FLAG}
RUNS = ",".join(f"{a}-{s}" for s in ("d32l2", "d96l2") for a in ("llama", "tnl", "hgrn2", "cosformer2"))


def start(config: str, runs: str, steps: int, core: int, setting: str) -> subprocess.Popen:
    """One child process timing `runs` under `setting` (a SETTINGS key) on `core`."""
    flags = " ".join(f for f in (os.environ.get("XLA_FLAGS", ""), SETTINGS[setting]) if f)
    return subprocess.Popen(
        [sys.executable, __file__, f"--config={config}", f"--runs={runs}", f"--steps={steps}",
         f"--core={core}", f"--setting={setting}"],
        env=dict(os.environ, XLA_FLAGS=flags), cwd=ROOT, stdout=subprocess.PIPE, text=True)


def result(child: subprocess.Popen) -> dict:
    """{run: CPU ms per step} a child printed."""
    out, _ = child.communicate()
    if child.returncode:
        raise SystemExit(f"a timing child failed (exit status {child.returncode})")
    return json.loads(out.splitlines()[-1])


def child(config: str, runs: str, steps: int, core: int) -> None:
    """Print {run: CPU ms per step} of `runs` as one JSON line: this process as a study worker."""
    sys.path.insert(0, str(ROOT / "bench"))
    from stacked_runs import cpu_seconds_per_step, stacked_inputs, stacked_step
    from step_loop import as_worker

    as_worker(core)
    from linscale_jax.study import presets
    from linscale_jax.study.scaling import plan

    by_name = {r.name: r for r in plan.build_plan(presets.preset(config), "/tmp")}
    out = {}
    for name in runs.split(","):
        step, fns, _ = stacked_step(by_name[name].config, 1)
        out[name] = round(1e3 * cpu_seconds_per_step(step, stacked_inputs(by_name[name].config, fns, 1),
                                                     steps), 3)
    print(json.dumps(out), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="cpu", help="a study preset: a packaged name or a file")
    p.add_argument("--runs", default=RUNS, help="comma list of the preset's runs")
    p.add_argument("--steps", type=int, default=200, help="steps per timed burst (3 bursts)")
    p.add_argument("--rounds", type=int, default=2, help="child processes per setting")
    p.add_argument("--core", type=int, default=0, help=argparse.SUPPRESS)  # a child's
    p.add_argument("--json", action="store_true")
    p.add_argument("--setting", choices=sorted(SETTINGS), help=argparse.SUPPRESS)  # a child's
    a = p.parse_args()
    if a.setting:
        return child(a.config, a.runs, a.steps, a.core)
    times = {s: [] for s in SETTINGS}
    for i in range(a.rounds):  # both settings at once, one per core, the cores swapped each round
        cores = (0, 1) if i % 2 == 0 else (1, 0)
        children = {s: start(a.config, a.runs, a.steps, c, s) for s, c in zip(SETTINGS, cores)}
        for s, proc in children.items():
            times[s].append(result(proc))
        if not a.json:
            print(f"round {i + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    if not a.json:
        print(f"cores 0 and 1 at once, one setting each (swapped each round), single-threaded XLA; "
              f"median of {a.rounds} processes per setting")
        print("| run | YNNPACK fusions (XLA's default) ms | XLA's own fusions ms | speed-up |")
        print("|---|---|---|---|")
    for run in a.runs.split(","):
        ynn = statistics.median(t[run] for t in times["ynn"])
        xla = statistics.median(t[run] for t in times["xla"])
        row = dict(run=run, ynn_ms=round(ynn, 3), xla_ms=round(xla, 3), speedup=round(ynn / xla, 3))
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"| {run} | {ynn:.2f} | {xla:.2f} | x{row['speedup']:.2f} |", flush=True)
    if not a.json:
        print(f"load average at the end: {[round(x, 2) for x in os.getloadavg()]}")


if __name__ == "__main__":
    main()
