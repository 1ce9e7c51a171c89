"""The step loop never waits on the devices between log steps: the prefetch thread (order, bounded
queue, errors, shutdown, data state), no device->host transfer after a block that ends at a non-log
step (counted, under jax.transfer_guard_device_to_host("disallow")), profiler traces, memory and
data-wait figures, metrics on a store that cannot append."""

import json
import threading
import time
import types

import jax
import numpy as np
import pytest
from etils import epath
from helpers.train import tiny_config

from linscale_jax.train import blocks
from linscale_jax.train import loop as trainer
from linscale_jax.train import programs
from linscale_jax.train import metrics as metrics_lib
from linscale_jax.train.overlap import Prefetcher


class Source:
    """Host batches 0, 1, 2, ... with a get_state; optionally failing at batch `fail_at`."""

    def __init__(self, n=None, fail_at=None):
        self.i, self.n, self.fail_at, self.made = 0, n, fail_at, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.n is not None and self.i >= self.n:
            raise StopIteration
        if self.i == self.fail_at:
            raise ValueError(f"bad record at batch {self.i}")
        self.i += 1
        self.made += 1
        return {"x": np.full((2,), self.i - 1)}

    def get_state(self):
        return {"batches": self.i}


def test_prefetch_keeps_order_and_the_state_of_each_batch():
    feed = Prefetcher(Source(n=20), lambda b: jax.device_put(b), depth=3)
    got = [feed.next() for _ in range(20)]
    assert [int(b["x"][0]) for b, _ in got] == list(range(20))
    assert [s["batches"] for _, s in got] == list(range(1, 21))  # the position after each batch
    with pytest.raises(StopIteration):
        feed.next()
    feed.close()


def test_prefetch_is_bounded_and_shuts_down():
    src = Source()
    feed = Prefetcher(src, lambda b: b, depth=2)
    time.sleep(0.5)
    assert src.made <= 2 + 1  # the queue's 2 and the one waiting to be handed over
    feed.next()
    feed.close()
    assert not feed._thread.is_alive()
    assert not any(t.name == "linscale-prefetch" and t.is_alive() for t in threading.enumerate())


def test_prefetch_raises_the_producer_error_in_order():
    feed = Prefetcher(Source(fail_at=3), lambda b: b, depth=2)
    assert [int(feed.next()[0]["x"][0]) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad record at batch 3"):
        feed.next()


# ---------------------------------------------------------------- the step loop, instrumented

LOG_STEPS = {4, 8}  # log_every=4 over 8 steps (8 is also the final checkpoint)
BLOCKS = [2, 4, 6, 8]  # blocks of at most 2 steps (blocks.MAX_STEPS patched); 4 and 6 end the
#                        profiled steps 5..6 as well
_FETCHES = ("_value", "__array__", "item", "tolist", "block_until_ready", "copy_to_host_async")


@pytest.fixture(scope="module")
def instrumented(tmp_path_factory):
    """An 8-step run in blocks of 2 steps, logging every 4 steps and profiling steps 5..6, with
    every device->host fetch on the main thread recorded against the number of steps dispatched
    so far; from the dispatch of a block that ends at a non-log step to the next dispatch,
    jax.transfer_guard_device_to_host is 'disallow' (it raises on accelerators; CPU arrays need no
    transfer, hence the count)."""
    from jax._src import array

    workdir = tmp_path_factory.mktemp("instrumented")
    mp = pytest.MonkeyPatch()
    dispatched, ends, fetches, guard = [0], [], [], []
    main = threading.main_thread()

    def counted(name, orig):
        def note():
            if threading.current_thread() is main:
                fetches.append((dispatched[0], name))
        if isinstance(orig, property):
            return property(lambda self: (note(), orig.fget(self))[1])
        return lambda self, *a, **k: (note(), orig(self, *a, **k))[1]

    for name in _FETCHES:
        mp.setattr(array.ArrayImpl, name, counted(name, getattr(array.ArrayImpl, name)))
    device_get = jax.device_get
    mp.setattr(jax, "device_get", lambda x: (fetches.append((dispatched[0], "device_get")),
                                             device_get(x))[1])
    mp.setattr(blocks, "MAX_STEPS", 2)
    plans, block_plan = [], blocks.block_plan
    mp.setattr(blocks, "block_plan", lambda *a: plans.append(block_plan(*a)) or list(plans[-1]))
    compiled = programs._compiled

    def instrumented_compiled(key):
        fns = compiled(key)
        real = fns.block_fn

        def block_fn(*args):
            while guard:
                guard.pop().__exit__(None, None, None)
            out = real(*args)
            dispatched[0] += plans[-1][len(ends)][1]  # the block's steps (its n, from the plan)
            ends.append(dispatched[0])
            if dispatched[0] not in LOG_STEPS:
                ctx = jax.transfer_guard_device_to_host("disallow")
                ctx.__enter__()
                guard.append(ctx)
            return out

        block_fn.lower = real.lower
        return types.SimpleNamespace(**dict(vars(fns), block_fn=block_fn))

    mp.setattr(programs, "_compiled", instrumented_compiled)
    c = tiny_config(steps=8, log_every=4, profile_steps="5,6")
    try:
        summary = trainer.train(c, workdir)
    finally:
        while guard:
            guard.pop().__exit__(None, None, None)
        mp.undo()
    return workdir, summary, fetches, ends


def test_non_log_steps_fetch_nothing_from_the_devices(instrumented):
    _, summary, fetches, ends = instrumented
    assert summary["step"] == 8 and sorted(summary["losses"]) == list(range(1, 9))
    assert ends == BLOCKS  # several steps per dispatch; blocks end at logs and profile edges
    by_step = {}
    for s, name in fetches:
        by_step.setdefault(s, []).append(name)
    print("device->host fetches on the main thread, by steps dispatched:",
          {s: len(v) for s, v in sorted(by_step.items())})  # (docs/results.md quotes it)
    assert {2, 6}.isdisjoint(by_step), by_step
    assert by_step.get(4) and by_step.get(8)  # the counter sees the log steps' fetches


def test_profile_steps_write_a_trace(instrumented):
    workdir = instrumented[0]
    traces = list((workdir / "profile").rglob("*.xplane.pb"))
    assert traces and all(t.stat().st_size > 0 for t in traces)


def test_rows_report_memory_and_data_wait(instrumented, capsys):
    rows = metrics_lib.read_rows(instrumented[0])
    assert [r["step"] for r in rows] == [4, 8]
    for r in rows:
        assert r["mem_gb"] > 0 and r["mem_peak_gb"] is None  # CPU: live arrays, no peak
        assert 0.0 <= r["data_wait"] <= 1.0


def test_profile_steps_are_checked():
    with pytest.raises(ValueError, match="profile_steps='5,2' must be 'A,B'"):
        metrics_lib.parse_profile_steps("5,2")
    assert metrics_lib.parse_profile_steps("7") == (7, 7)
    assert metrics_lib.parse_profile_steps("") is None


def test_data_wait_counts_only_idle_devices():
    """A slow source with the devices idle: waiting counts; with the last step still running
    (busy not ready), it does not."""
    class Slow(Source):
        def __next__(self):
            time.sleep(0.05)
            return super().__next__()

    feed = Prefetcher(Slow(), lambda b: b, depth=1)
    done = jax.numpy.zeros(())
    done.block_until_ready()
    for _ in range(8):  # at most 2 made ahead (the queue's 1 and the one being handed over)
        feed.next(busy=done)
    idle = feed.idle_s
    assert idle > 0.1

    class Busy:
        def is_ready(self):
            return False

    for _ in range(4):
        feed.next(busy=Busy())
    assert feed.idle_s == idle
    feed.close()


# ---------------------------------------------------------------- a store that cannot append


def test_metrics_on_a_store_without_append(tmp_path, monkeypatch):
    """Object stores: rows go to chunk files, each written once; no file is appended to or
    rewritten, and a resume drops the rows after its step."""
    writes, opened = [], []
    path_type = type(epath.Path(tmp_path))
    real_open = path_type.open

    def no_append(self, mode="r", *a, **k):
        if "a" in mode or "+" in mode:
            raise OSError(f"append refused on {self}")
        if "w" in mode:
            writes.append(str(self))
        return real_open(self, mode, *a, **k)

    monkeypatch.setattr(path_type, "open", no_append)
    monkeypatch.setattr(metrics_lib, "appendable", lambda p: False)
    log = metrics_lib.MetricsLogger(tmp_path, 10, 0, tensorboard=False, stream=open("/dev/null", "w"))
    for s in range(1, 5):
        log.write(dict(step=s, loss=1.0))
    log.flush()  # a checkpoint
    for s in range(5, 8):
        log.write(dict(step=s, loss=1.0))
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["metrics.jsonl.00000", "metrics.jsonl.00001"]
    assert len(writes) == len(set(writes)) == 2  # each chunk written once, nothing rewritten
    assert [r["step"] for r in metrics_lib.read_rows(tmp_path)] == list(range(1, 8))
    log = metrics_lib.MetricsLogger(tmp_path, 10, 4, tensorboard=False)  # resume at step 4
    log.write(dict(step=5, loss=2.0))
    log.close()
    rows = metrics_lib.read_rows(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and rows[-1]["loss"] == 2.0
    assert json.loads((tmp_path / "metrics.jsonl.00001").read_text())["step"] == 5


@pytest.mark.parametrize("kind,peak", [("TPU v5 lite", 197e12), ("TPU v5p", 459e12),
                                       ("NVIDIA H100 80GB HBM3", 989e12)])
def test_mfu_peak_of_a_known_accelerator(monkeypatch, kind, peak):
    """TPU peaks are kernels_pallas.tpu's figures (one table), GPU peaks metrics' own."""
    monkeypatch.delenv("LINSCALE_PEAK_FLOPS", raising=False)
    monkeypatch.setattr(jax, "devices", lambda: [types.SimpleNamespace(device_kind=kind)])
    assert metrics_lib.peak_flops_per_device() == peak
