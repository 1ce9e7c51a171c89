"""What the two backends of a study's runs share: the local pool (study.workers) and Ray
(study.ray_backend).

    SINGLE_THREAD, MALLOC_ENV   the settings of a run's worker process on CPU (XLA_FLAGS, malloc)
    redirect(fd)                this process's stdout and stderr into the run's log (file descriptors)
    progress(...)               the tail of a run's "done" or "FAILED" line: finished, elapsed, ETA
    error_class(e)              a failed run's exception class, as it travels back to the executor
"""

from __future__ import annotations

import os
import pickle
import sys
import time

from linscale_jax.train.metrics import fmt_time

# One XLA:CPU thread per run: a miniature run cannot keep two cores busy (study.workers).
SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false"
# glibc malloc: keep freed memory instead of unmapping it. XLA:CPU allocates each step's buffers
# afresh; with the defaults, buffers over the mmap threshold are mapped and unmapped every step and
# every touched page faults again (llama-d48 single-core, `perf stat -e page-faults` over
# bench/train_step.py --archs=llama --sizes=d48 --seq=128 --steps=40: 564k faults, 156k with these).
# A value already set in the environment wins.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "1000000000",
              "MALLOC_TOP_PAD_": "536870912"}


def redirect(out: int, err: int | None = None) -> None:
    """Point file descriptors 1 and 2 at `out` (2 at `err` when given): progress bars, absl and XLA
    write there too. Restore with the descriptors saved by os.dup(1), os.dup(2)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out, 1)
    os.dup2(out if err is None else err, 2)


def progress(runs: list, started, finished: set, timed: list, eta, slots: int, t0: float) -> str:
    """' | finished k/n | elapsed T | ETA T' for `runs` (plan.Run): `started` and `finished` hold run
    names; `eta(timed, todo)` (runner.eta_seconds, or None for no ETA) turns the finished runs'
    (FLOPs, seconds) into one slot's remaining seconds, divided by the `slots` that run at once. A
    run under way counts half its FLOPs, on average."""
    rest = ""
    if eta is not None and timed:
        left = [r.flops_exact for r in runs if r.name not in started]
        running = [r.flops_exact / 2 for r in runs if r.name in started and r.name not in finished]
        rest = f" | ETA {fmt_time(eta(timed, left + running) / slots)}"
    return f" | finished {len(finished)}/{len(runs)} | elapsed {fmt_time(time.time() - t0)}{rest}"


def error_class(e: BaseException) -> type | None:
    """type(e) when it can travel between processes (pickled by name), else None."""
    try:
        pickle.dumps(type(e))
    except Exception:  # noqa: BLE001 - a class defined inside a function
        return None
    return type(e)
