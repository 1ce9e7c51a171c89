"""Failure cases and what they print: exit status, seconds to exit, lines printed, the first line.

    python bench/failures.py [--cases=kill1,kill0,lone,efbig,readonly,eval_ro,study,steps,fit,lock]
                             [--peer_timeout=60] [--out=/tmp/failures]

Each case runs the real commands (`python -m linscale_jax.train`, `eval`, `fit`, `study`) as
subprocesses on 127.0.0.1 and prints one markdown row. Multi-process cases use docs/training.md's local
launch (2 processes, configs/tiny.py); "seconds" counts from the kill (kill -9 cases) or from the
launch. The read-only cases need `unshare -rm` (a read-only bind mount in a private namespace).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TINY = f"--config={ROOT / 'configs' / 'tiny.py'}"


def env(**kw):
    e = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    e.update(kw)
    return e


def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_cmd(workdir, *extra):
    return [PY, "-m", "linscale_jax.train", TINY, f"--workdir={workdir}", *extra]


def two(workdir, ids=(0, 1), extra=()):
    p = port()
    return {i: subprocess.Popen(train_cmd(workdir, "--config.train.steps=100000",
                                          "--config.checkpoint.every_steps=20", *extra,
                                          f"--coordinator_address=127.0.0.1:{p}",
                                          "--num_processes=2", f"--process_id={i}"),
                                cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for i in ids}


def row(name, cmd, rc, seconds, out):
    lines = [x for x in out.splitlines() if x.strip()]
    first = next((x for x in lines if x.startswith("ERROR")), lines[0] if lines else "")
    first = first if len(first) < 260 else first[:257] + "..."
    return f"| {name} | `{cmd}` | {rc} | {seconds:.1f} | {len(lines)} | `{first}` |"


def kill(which, base, timeout):
    wd = base / f"kill{which}"
    procs = two(wd, extra=(f"--peer_timeout={timeout}",))
    while not (wd / "checkpoints" / "20" / "metadata").exists():
        time.sleep(0.2)
    time.sleep(1)
    procs[which].kill()
    t0 = time.time()
    other = procs[1 - which]
    out = other.communicate()[0]
    procs[which].communicate()
    return row(f"kill -9 process {which} after checkpoint 20 (process {1 - which})",
               "2 × python -m linscale_jax.train --config=configs/tiny.py ... (the local launch of docs/training.md)",
               other.returncode, time.time() - t0, out) + f" lock left: {(wd / 'train.lock').exists()} |"


def lone(base, timeout):
    t0 = time.time()
    (p,) = two(base / "lone", ids=(0,), extra=(f"--peer_timeout={timeout}",)).values()
    out = p.communicate()[0]
    return row("only --process_id=0 started", "python -m linscale_jax.train ... --num_processes=2 "
               "--process_id=0", p.returncode, time.time() - t0, out)


def efbig(base):
    wd = base / "efbig"
    t0 = time.time()
    r = subprocess.run(["bash", "-c", "ulimit -f 1000; exec \"$@\"", "bash",
                        *train_cmd(wd, "--config.train.steps=400", "--config.model.d_model=128",
                                   "--config.checkpoint.every_steps=20",
                                   "--config.checkpoint.async_save=true")],
                       cwd=ROOT, env=env(), capture_output=True, text=True)
    return row("`ulimit -f 1000`, async saves", "ulimit -f 1000; python -m linscale_jax.train "
               "--config=configs/tiny.py --config.model.d_model=128 ...", r.returncode,
               time.time() - t0, r.stdout + r.stderr)


RO = ["unshare", "-rm", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && '
      'shift && exec "$@"']


def readonly(base):
    wd = base / "ro"
    subprocess.run(train_cmd(wd, "--config.train.steps=20"), cwd=ROOT, env=env(),
                   capture_output=True, check=True)
    rows = []
    t0 = time.time()
    r = subprocess.run([*RO, str(wd), "x", *train_cmd(wd, "--config.train.steps=40")], cwd=ROOT,
                       env=env(), capture_output=True, text=True)
    rows.append(row("train on a read-only workdir", "python -m linscale_jax.train --workdir=RO ...",
                    r.returncode, time.time() - t0, r.stdout + r.stderr))
    for extra in ((), (f"--out={base / 'ro-eval'}",)):
        t0 = time.time()
        r = subprocess.run([*RO, str(wd), "x", PY, "-m", "linscale_jax.eval", f"--workdir={wd}", "--steps=last",
                            "--val_batches=1", *extra], cwd=ROOT, env=env(), capture_output=True,
                           text=True)
        rows.append(row("eval of a read-only workdir" + (" with --out" if extra else ""),
                        "python -m linscale_jax.eval --workdir=RO" + (" --out=DIR" if extra else ""),
                        r.returncode, time.time() - t0, r.stdout + r.stderr))
    return "\n".join(rows)


def study(base):
    wd = base / "study"
    p = subprocess.Popen([PY, "-m", "linscale_jax.study", "--config=configs/study/quick.py", f"--workdir={wd}"],
                         cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    while not list(wd.glob("runs/*/metrics.jsonl")):
        time.sleep(0.5)
    time.sleep(3)
    p.send_signal(signal.SIGTERM)
    t0 = time.time()
    out = p.communicate()[0]
    tail = out.split("\n")
    after = [x for x in tail if x and not x.startswith("[study] ")] or tail[-2:]
    saved = sorted(x.parent.name for x in wd.glob("runs/*/checkpoints"))
    return row("SIGTERM to python -m linscale_jax.study", "python -m linscale_jax.study --config=configs/study/quick.py",
               p.returncode, time.time() - t0, "\n".join(after)) + f" runs with checkpoints: {saved} |"


def simple(name, cmd, **kw):
    t0 = time.time()
    r = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, **kw)
    return row(name, " ".join(str(c).replace(str(ROOT) + "/", "") for c in cmd[1:]), r.returncode,
               time.time() - t0, r.stderr)


def lock(base):
    wd = base / "lock"
    a = subprocess.Popen(train_cmd(wd, "--config.train.steps=100000"), cwd=ROOT, env=env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (wd / "train.lock").exists():
        time.sleep(0.2)
    try:
        return simple("a second trainer on a locked workdir", train_cmd(wd))
    finally:
        a.send_signal(signal.SIGTERM)
        a.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="kill1,kill0,lone,efbig,readonly,study,steps,fit,lock")
    p.add_argument("--peer_timeout", type=int, default=60)
    p.add_argument("--out", default="/tmp/failures")
    a = p.parse_args()
    base = Path(a.out)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    bad = base / "bad.csv"
    bad.write_text("arch,run,step,n_params,tokens,loss\ntnl,a,1,1,1,1\n")
    cases = {
        "kill1": lambda: kill(1, base, a.peer_timeout), "kill0": lambda: kill(0, base, a.peer_timeout),
        "lone": lambda: lone(base, a.peer_timeout), "efbig": lambda: efbig(base),
        "readonly": lambda: readonly(base), "study": lambda: study(base),
        "steps": lambda: simple("--config.train.steps=-5",
                                train_cmd(base / "steps", "--config.train.steps=-5")),
        "fit": lambda: simple("fit on a table without flops", [PY, "-m", "linscale_jax.fit", f"--table={bad}",
                                                              "--approach=1", f"--out={base}/fit"]),
        "fit_usage": lambda: simple("fit without --approach", [PY, "-m", "linscale_jax.fit", f"--table={bad}"]),
        "lock": lambda: lock(base),
    }
    print("| case | command | rc | seconds | lines | first line |")
    print("|---|---|---|---|---|---|")
    for name in a.cases.split(","):
        print(cases[name](), flush=True)


if __name__ == "__main__":
    main()
