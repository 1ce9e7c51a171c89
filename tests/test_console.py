"""The console filter of linscale_jax.console: library tracebacks go to NOISE, other lines pass.
Two threads that print their tracebacks at once (Orbax's writer threads after a failed save) are
interleaved line by line here, in a fixed order, and neither leaks a line to the console."""

import io
import threading

from linscale_jax import console

TRACEBACK = [
    "Traceback (most recent call last):\n",
    '  File "asyncio/base_events.py", line 806, in call_soon_threadsafe\n',
    "    self._check_closed()\n",
    '  File "asyncio/base_events.py", line 519, in _check_closed\n',
    "    raise RuntimeError('Event loop is closed')\n",
    "RuntimeError: Event loop is closed\n",
]


def test_interleaved_tracebacks_of_two_threads_stay_off_the_console():
    out = io.StringIO()
    f = console._TracebackFilter(out)
    turns = [threading.Event() for _ in range(2 * len(TRACEBACK) + 1)]

    def printer(first: int) -> None:  # writes its lines at turns first, first + 2, ...
        for i, line in enumerate(TRACEBACK):
            turns[first + 2 * i].wait(10)
            f.write(line[:5])  # a line in two writes, as print and traceback do
            f.write(line[5:])
            turns[first + 2 * i + 1].set()

    tb = "".join(TRACEBACK)
    mine_before = sum(n == tb for n in list(console.NOISE))  # NOISE is shared (other tests' threads) and bounded
    threads = [threading.Thread(target=printer, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    turns[0].set()
    for t in threads:
        t.join(10)
    f.write("step 8 | loss 3.2\n")
    f.flush()
    assert out.getvalue() == "step 8 | loss 3.2\n"
    noise = list(console.NOISE)
    assert sum(n == tb for n in noise) - mine_before == 2  # each thread's traceback whole, once
    assert all(n == tb for n in noise if 'File "asyncio/' in n)  # no entry holds a piece of one


def test_a_line_that_is_not_a_traceback_passes_whole():
    out = io.StringIO()
    f = console._TracebackFilter(out)
    f.write("ERROR: checkpoint 4 could not ")
    f.write("be written; raise the limit\n")
    assert out.getvalue() == "ERROR: checkpoint 4 could not be written; raise the limit\n"
