"""The console of a command: library noise off it, into the failure log; the one error line on it.

    with console.quiet_native_stderr():   # TensorFlow / CUDA stubs loading (data._tf, metrics)
        import tensorflow
    console.print_error("<problem>; <fix>")   # ERROR: [process I] <problem>; <fix>

What is kept off the console goes to `NOISE`, which the command wrapper (linscale_jax.run.command)
appends to the failure log: native stderr while TensorFlow / CUDA stubs load (oneDNN, cudart,
cuInit, absl::InitializeLog lines), error records and tracebacks of library loggers (Orbax,
TensorStore, asyncio, absl), tracebacks that libraries print from their threads and callbacks, and
(`native_to_noise`, an entry point's own process) everything native code writes to file
descriptor 2. `LINSCALE_VERBOSE_STARTUP=1` keeps native output on the console. In a multi-process
run linscale_jax.parallel.supervise points `CONSOLE` at the terminal and sets the process prefix.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import sys
import tempfile
import threading
import traceback
from pathlib import Path

NOISE: collections.deque = collections.deque(maxlen=200)  # text for the failure log
CONSOLE = {"stream": None, "prefix": ""}  # set by linscale_jax.parallel.supervise in multi-process runs
_VERBOSE = "LINSCALE_VERBOSE_STARTUP"


def print_error(text: str) -> None:
    """Print `ERROR: <text>` as the command's one line (on the console, with the process prefix)."""
    sys.stdout.flush()
    print(f"ERROR: {CONSOLE['prefix']}{text}", file=CONSOLE["stream"] or sys.stderr, flush=True)


def fallback_log_dir() -> Path:
    """Where logs go when the workdir cannot take them: $TMPDIR/linscale_jax-logs."""
    return Path(tempfile.gettempdir()) / "linscale_jax-logs"


@contextlib.contextmanager
def quiet_native_stderr():
    """Redirect fd 2 (C++ logs of TensorFlow/CUDA/absl) into NOISE for the duration."""
    if os.environ.get(_VERBOSE):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            if text:
                NOISE.append(text)


_NATIVE: list = []


def native_to_noise() -> None:
    """For the rest of the process: file descriptor 2 (native logs of TensorStore, gRPC, XLA) goes
    to a temporary file whose text joins the failure log; Python's sys.stderr stays on the console."""
    if _NATIVE or os.environ.get(_VERBOSE) or os.environ.get("LINSCALE_SUPERVISED"):
        return  # done, asked for, or already routed to the process's log (dist.supervise)
    sys.stderr.flush()
    console = os.fdopen(os.dup(2), "w", buffering=1)
    tmp = tempfile.TemporaryFile()
    os.dup2(tmp.fileno(), 2)
    sys.stderr = console
    _NATIVE.append(tmp)


def native_text() -> str:
    """What native code wrote to file descriptor 2 since native_to_noise()."""
    for f in _NATIVE:
        f.seek(0)
        text = f.read().decode(errors="replace")
        f.seek(0, 2)
        if text.strip():
            return text
    return ""


class _LibraryNoise(logging.Filter):
    """Keeps tracebacks of library loggers (Orbax, TensorStore, asyncio) off the console."""

    NOISY = ("orbax", "tensorstore", "asyncio", "jax._src", "absl")

    def filter(self, record: logging.LogRecord) -> bool:
        noisy = record.exc_info or record.levelno >= logging.ERROR and \
            (record.name.startswith(self.NOISY) or "orbax" in record.pathname)
        if noisy:
            NOISE.append(logging.Formatter().format(record))
            return False
        return True


class _TracebackFilter:
    """sys.stderr while a command runs: Python tracebacks that libraries print from their threads
    and callbacks (Orbax/TensorStore after a failed write: `RuntimeError: Event loop is closed`)
    go to NOISE; every other line passes through. Lines are assembled and tracebacks recognised
    per writing thread, since several threads print their tracebacks at once."""

    def __init__(self, stream):
        self._stream, self._lock = stream, threading.RLock()
        self._buf: dict[int, str] = {}  # thread id -> the unfinished line
        self._capture: dict[int, list[str]] = {}  # thread id -> the traceback being captured

    def write(self, text: str) -> int:
        me = threading.get_ident()
        with self._lock:
            buf = self._buf.pop(me, "") + text
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                self._line(me, line + "\n")
            if buf:
                self._buf[me] = buf
        return len(text)

    def _line(self, me: int, line: str) -> None:
        if me not in self._capture and line.startswith("Traceback (most recent call last)"):
            self._capture[me] = []
        if me not in self._capture:
            self._stream.write(line)
            return
        self._capture[me].append(line)
        if line[:1] not in (" ", "\n", "\t") and not line.startswith(
                ("Traceback", "During handling", "The above exception")):
            NOISE.append("".join(self._capture.pop(me)))  # the exception's own line ends it

    def flush(self) -> None:
        me = threading.get_ident()
        with self._lock:
            if me in self._buf and me not in self._capture:
                self._stream.write(self._buf.pop(me))
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


_FILTER: list = []


def capture_library_noise() -> None:
    """Library log records, thread exceptions and library tracebacks go to NOISE from now on."""
    if not _FILTER:
        _FILTER.append(_LibraryNoise())
        for h in logging.getLogger().handlers:
            h.addFilter(_FILTER[0])
        with contextlib.suppress(Exception):
            from absl import logging as absl_logging

            absl_logging.get_absl_handler().addFilter(_FILTER[0])
        threading.excepthook = _thread_failure
        sys.excepthook = functools.partial(_library_traceback, sys.excepthook)
    if not isinstance(sys.stderr, _TracebackFilter):  # kept to the end: threads print at exit too
        original = sys.stderr
        sys.stderr = _TracebackFilter(original)
        handlers = list(logging.getLogger().handlers)
        with contextlib.suppress(Exception):
            from absl import logging as absl_logging

            handlers.append(absl_logging.get_absl_handler().python_handler)
        for h in handlers:  # log handlers that hold the original stream
            if isinstance(h, logging.StreamHandler) and h.stream is original:
                h.setStream(sys.stderr)


def _thread_failure(args) -> None:
    """Background-thread failures (async checkpoint writes): kept for the log."""
    NOISE.append("".join(traceback.format_exception(args.exc_type, args.exc_value,
                                                    args.exc_traceback)))


def _library_traceback(default, exc_type, exc, tb) -> None:
    """Printed by native code (TensorStore's callbacks into a closed asyncio loop after a failed
    write): kept for the log; any other uncaught exception is printed as usual."""
    frames = traceback.extract_tb(tb)
    if any(lib in f.filename for f in frames for lib in _LibraryNoise.NOISY):
        NOISE.append("".join(traceback.format_exception(exc_type, exc, tb)))
    else:
        default(exc_type, exc, tb)
