"""Independent fits on every core this process may use, returned in the order given.

    thetas = map_ordered(refit, tables)   # == [refit(t) for t in tables], on cores() processes

A law's refits on bootstrap draws (fit.holdout.law_draws) are thousands of small L-BFGS-B fits, one
independent of the next: a scaling study's report spends most of its time in them. The pool's
workers are fresh interpreters (spawn: jax, imported by the study's parent, is not fork-safe) made
once per process and kept; each item's result is what the same call returns in this process, so a
parallel run returns exactly the serial one's. One core (a pinned study worker, a 1-CPU container)
or fewer than MIN_ITEMS items run here, without a pool.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
from concurrent.futures.process import BrokenProcessPool
import multiprocessing as mp
import os
import signal
import sys

MIN_ITEMS = 32  # fewer items run in this process: starting the pool (0.5-2 s) costs more
_pools: dict[int, cf.ProcessPoolExecutor] = {}


def cores() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _ignore_interrupt():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops the pool


def _executor(workers: int) -> cf.ProcessPoolExecutor:
    if workers not in _pools:
        _pools[workers] = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                                                 initializer=_ignore_interrupt)
    return _pools[workers]


def shutdown():
    """Stop every pool (at exit; tests that count processes call it)."""
    while _pools:
        _pools.popitem()[1].shutdown(wait=True, cancel_futures=True)


atexit.register(shutdown)


def map_ordered(fn, items, workers: int | None = None) -> list:
    """[fn(x) for x in items] on `workers` processes (default: cores()); fn and the items must
    pickle (fn a module-level function or a functools.partial of one). A pool that breaks (a
    worker killed) is dropped and the items run here: the results are the same."""
    items = list(items)
    workers = min(cores() if workers is None else int(workers), len(items))
    if workers < 2 or len(items) < MIN_ITEMS:
        return [fn(x) for x in items]
    try:
        return list(_executor(workers).map(fn, items, chunksize=max(1, len(items) // (4 * workers))))
    except BrokenProcessPool as e:
        _pools.pop(workers, None)
        print(f"fit.pool: the fit pool stopped ({e}); fitting the {len(items)} items in this process",
              file=sys.stderr)
        return [fn(x) for x in items]
