"""Input overlapped with device compute: the next batches are made and put on the devices in a
background thread while the current step runs.

    feed = Prefetcher(host_batches, put, depth=2)   # any iterator of host batches
    batch, data_state = feed.next(busy=last_loss)   # in source order; producer errors re-raised
    feed.idle_s                                     # seconds the devices sat idle waiting for data
    feed.close()                                    # stops and joins the thread

One producer thread calls next(host_batches), then put(batch) (host -> device: the global
jax.Arrays of the batch), then `host_batches.get_state()` when the iterator has it, and hands
(device batch, state after that batch) to the step loop through a queue of `depth` items. The
order is the source's; the state travels with its batch, so a checkpoint stores the position of
the batches the steps consumed, not of the ones prefetched. An exception in the producer
(StopIteration included) is raised by the next `next()` with its traceback. `close()` stops the
producer at its next hand-over and joins it.

`idle_s` accumulates the time `next()` waited while `busy` (an output of the last dispatched step)
was already computed, i.e. while the devices had nothing to do: the data-wait share of the step
loop. `busy.is_ready()` asks without a transfer or a wait.
"""

from __future__ import annotations

import queue
import threading
import time

POLL_S = 0.002


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


class Prefetcher:
    def __init__(self, source, put, depth: int = 2):
        self._source, self._put = source, put
        self._state = getattr(source, "get_state", None)
        self._queue: queue.Queue = queue.Queue(maxsize=max(int(depth), 1))
        self._stop = threading.Event()
        self.idle_s = 0.0
        self._thread = threading.Thread(target=self._run, name="linscale-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self._put(next(self._source))
                state = self._state() if self._state is not None else None
                if not self._offer((batch, state)):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the step loop
            self._offer(_Failed(e))

    def _offer(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def next(self, busy=None):
        """(device batch, data state after it). Waiting while `busy` is ready counts as idle."""
        while True:
            t = time.perf_counter()
            try:
                item = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                if busy is None or busy.is_ready():
                    self.idle_s += time.perf_counter() - t
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the input thread stopped") from None
                continue
            if isinstance(item, _Failed):
                self.close()
                raise item.error
            return item

    def close(self) -> None:
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
