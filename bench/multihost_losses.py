"""Loss sequences of one config trained four ways with REAL processes on 127.0.0.1 (gloo), side by side.

    python bench/multihost_losses.py [--config=configs/tiny.py] [--steps=40] [--out=DIR]

  1x4      one process, 4 CPU devices (the reference)
  2x2      two processes x 2 devices
  kill-9   2x2, both processes kill -9'd at step --kill_at, the same command run again (resumes from
           the newest checkpoint before it)
  elastic  2x2 preempted by SIGTERM to process 1 at step --stop_at, resumed by 1 process x 4 devices
Every run is the full config (its lr schedule and checkpoint steps unchanged) stopped by a SIGTERM
to process 0 while it logs step --steps (with several processes JAX's preemption sync service
picks the stop step, one or two steps later; the table compares steps 1..--steps); log_every=1
only adds rows. Prints a markdown
table of the losses, the max |difference| to 1x4, and every command it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "multihost_worker.py"


def launch(workdir, processes, devices, hook, config, log):
    """Start the processes of one run; returns (Popen list, command strings)."""
    sys.path.insert(0, str(ROOT))
    from linscale_jax.parallel.distributed import free_port

    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    procs, cmds = [], []
    for i in range(processes):
        args = [f"--config={config}", f"--workdir={workdir}", "--config.train.log_every=1"]
        if processes > 1:
            args += [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={processes}",
                     f"--process_id={i}"]
        cmds.append(f"XLA_FLAGS=--xla_force_host_platform_device_count={devices} JAX_PLATFORMS=cpu "
                    f"python tests/helpers/multihost_worker.py {hook} " + " ".join(args))
        procs.append(subprocess.Popen([sys.executable, str(WORKER), hook, *args], cwd=ROOT, env=env,
                                      stdout=log, stderr=subprocess.STDOUT))
    return procs, cmds


def run(workdir, processes, devices, hook, config, log):
    procs, cmds = launch(workdir, processes, devices, hook, config, log)
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"run in {workdir} failed ({codes}); see the log")
    return cmds


def losses(workdir) -> dict[int, float]:
    rows = [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/tiny.py")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--kill_at", type=int, default=25)
    p.add_argument("--stop_at", type=int, default=20)
    p.add_argument("--out", default=None, help="directory for the runs (default: a temp dir)")
    a = p.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="multihost_losses_"))
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "log.txt", "w")
    stop = f"sigterm_at={a.steps}:0"  # SIGTERM while logging step --steps: save and stop soon after
    cmds, t0 = {}, time.time()

    print("1x4 ...", flush=True)
    cmds["1x4"] = run(out / "1x4", 1, 4, stop, a.config, log)
    print("2x2 ...", flush=True)
    cmds["2x2"] = run(out / "2x2", 2, 2, stop, a.config, log)

    print("kill-9 ...", flush=True)
    wd = out / "kill9"
    procs, c1 = launch(wd, 2, 2, f"sleep_after={a.kill_at}", a.config, log)
    while not all((wd / f".at-{a.kill_at}-{i}").exists() for i in range(2)):
        if any(p.poll() is not None for p in procs):
            raise SystemExit("kill-9 run ended early; see the log")
        time.sleep(0.2)
    for pr in procs:
        pr.send_signal(signal.SIGKILL)
        pr.wait()
    cmds["kill-9"] = c1 + [f"kill -9 both at step {a.kill_at}"] + run(wd, 2, 2, stop, a.config, log)

    print("elastic ...", flush=True)
    wd = out / "elastic"
    cmds["elastic"] = (run(wd, 2, 2, f"sigterm_at={a.stop_at}:1", a.config, log)
                       + run(wd, 1, 4, stop, a.config, log))

    table = {k: losses(out / d) for k, d in
             (("1x4", "1x4"), ("2x2", "2x2"), ("kill-9", "kill9"), ("elastic", "elastic"))}
    names = list(table)
    lines = ["| step | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
    for s in range(1, a.steps + 1):
        lines.append(f"| {s} | " + " | ".join(f"{table[n][s]:.6f}" for n in names) + " |")
    ref = table["1x4"]
    diffs = {n: max(abs(table[n][s] - ref[s]) for s in range(1, a.steps + 1)) for n in names[1:]}
    same = table["kill-9"] == table["2x2"]
    print("\n".join(lines))
    print("\nmax |loss - 1x4| over steps 1..%d: " % a.steps
          + ", ".join(f"{n} {d:.2e}" for n, d in diffs.items()))
    print(f"kill-9 run bit-identical to the uninterrupted 2x2 run: {same}")
    print(f"({time.time() - t0:.0f} s; runs under {out})\n\nCommands (from the repository root):")
    for n, cs in cmds.items():
        print(f"{n}:")
        for c in cs:
            print(f"  {c}")
    if not a.out:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
