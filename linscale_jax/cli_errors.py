"""User-facing failures in one line; tracebacks and library noise go to a log file.

    import linscale_jax.cli_errors as cli_errors      # first import of a CLI entry point
    sys.exit(cli_errors.run(lambda: main(...), workdir=DIR, command="train"))

`run` calls the command. On an exception it prints ONE line to stderr, `ERROR: <problem>; <fix>`,
and writes the traceback (plus library log records and native start-up output captured meanwhile)
to DIR/logs/<command>-<time>.log, naming that file on the same line. Refusals that leave the
workdir untouched (another trainer holds it, the config changes the run, --init_from on a run
with checkpoints, --resume_step to a missing step) write their log to $TMPDIR/linscale_jax-logs/
instead, so the workdir stays byte-identical. A workdir the failed command created and left
without checkpoints is removed (its log then goes to $TMPDIR/linscale_jax-logs/, as does the log of
a workdir that cannot be written: the line names the file either way). A gs://... workdir stays one
(etils.epath): its log goes to gs://.../logs/. Storage failures are recognised anywhere in the exception
chain, by errno or by TensorStore's text, and each gets its own fix: ENOSPC (full disk), EDQUOT
(quota), EFBIG (`ulimit -f` or the file system's largest file), EROFS (read-only mount), EACCES /
EPERM (permissions). A `Stopped` (a clean stop by a signal, everything saved) prints its line
without ERROR: and returns 0. argparse commands use linscale_jax.errors.ArgumentParser for the
same one-line usage error (rc 2).

In a multi-process run (linscale_jax.dist.supervise) the line goes to the console even where
stdout/stderr go to the process's log, prefixed with the process id: `ERROR: [process 1] ...`.

`quiet_native_stderr()` captures file descriptor 2 while TensorFlow / CUDA stubs load (oneDNN,
cudart, cuInit, absl::InitializeLog lines); the captured text joins the log of a failure.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from linscale_jax import contract
from linscale_jax.errors import Refusal, Stopped, UserError

NOISE: collections.deque = collections.deque(maxlen=200)  # captured native stderr and library
#                                                          log records (for the failure log)


@contextlib.contextmanager
def quiet_native_stderr():
    """Redirect fd 2 (C++ logs of TensorFlow/CUDA/absl) into a buffer for the duration."""
    if os.environ.get("LINSCALE_VERBOSE_STARTUP"):
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


_FILTER = None


def install_log_capture() -> None:
    global _FILTER
    if _FILTER is not None:
        return
    f = _FILTER = _LibraryNoise()
    for h in logging.getLogger().handlers:
        h.addFilter(f)
    with contextlib.suppress(Exception):
        from absl import logging as absl_logging

        absl_logging.get_absl_handler().addFilter(f)

    def hook(args):  # background-thread failures (async checkpoint writes): keep for the log
        NOISE.append("".join(traceback.format_exception(args.exc_type, args.exc_value,
                                                        args.exc_traceback)))

    threading.excepthook = hook
    default = sys.excepthook

    def library(exc_type, exc, tb):  # printed by native code (TensorStore's callbacks into a closed
        frames = traceback.extract_tb(tb)  # asyncio loop after a failed write): keep for the log
        if any(lib in f.filename for f in frames for lib in _LibraryNoise.NOISY):
            NOISE.append("".join(traceback.format_exception(exc_type, exc, tb)))
        else:
            default(exc_type, exc, tb)

    sys.excepthook = library


class _TracebackFilter:
    """sys.stderr while a command runs: Python tracebacks that libraries print from their threads
    and callbacks (Orbax/TensorStore after a failed write: `RuntimeError: Event loop is closed`)
    go to NOISE (the failure log); every other line passes through."""

    def __init__(self, stream):
        self._stream, self._buf, self._capture = stream, "", None

    def write(self, text: str) -> int:
        self._buf += text
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            self._line(line + "\n")
        return len(text)

    def _line(self, line: str) -> None:
        if self._capture is None and line.startswith("Traceback (most recent call last)"):
            self._capture = []
        if self._capture is None:
            self._stream.write(line)
            return
        self._capture.append(line)
        if line[:1] not in (" ", "\n", "\t") and not line.startswith(
                ("Traceback", "During handling", "The above exception")):
            NOISE.append("".join(self._capture))  # the exception's own line ends the traceback
            self._capture = None

    def flush(self) -> None:
        if self._buf and self._capture is None:
            self._stream.write(self._buf)
            self._buf = ""
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


# errno -> (TensorStore / strerror text, problem, fix); {where}: " under DIR", {path}: the file
_STORAGE = {
    errno.ENOSPC: ("No space left on device", "no space left on device while writing{where}",
                   "free disk space (or move the workdir)"),
    errno.EDQUOT: ("Disk quota exceeded", "disk quota exceeded while writing{where}",
                   "free space within your quota or have it raised (quota -s shows it)"),
    errno.EFBIG: ("File too large", "a file grew past the largest file allowed ({limit}) while "
                  "writing{where}", "raise the limit (ulimit -f unlimited) or move the workdir to a "
                  "file system that allows larger files"),
    errno.EROFS: ("Read-only file system", "{path} is on a read-only file system",
                  "remount it read-write or pass a writable directory (--workdir; eval: --out)"),
    errno.EACCES: ("Permission denied", "permission denied writing {path}",
                   "make it writable for this user (chown/chmod) or pass another directory"),
}
_STORAGE[errno.EPERM] = ("Operation not permitted",) + _STORAGE[errno.EACCES][1:]
_RESUME = "then re-run the same command: it resumes from the last complete checkpoint."


_WRITING = re.compile(r"(?:writing|opening|creating|path) ['\"]?(/[^\s;'\",]+)")


def storage_errno(e: BaseException) -> tuple[int, str | None] | None:
    """(errno, path or None) of the first storage failure in e's chain, or None."""
    for x in _chain(e):
        if isinstance(x, OSError) and x.errno in _STORAGE:
            return x.errno, x.filename
        text = str(x)
        for code, (needle, *_) in _STORAGE.items():
            if needle in text or f"os_error_code='{code}'" in text or f"os_error_code={code}" in text:
                m = _WRITING.search(text)
                return code, m.group(1) if m else None
    return None


def disk_full(e: BaseException) -> bool:
    return (storage_errno(e) or (None,))[0] == errno.ENOSPC


def _file_size_limit() -> str:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return "the file system's maximum"
    return "the file system's maximum" if soft == resource.RLIM_INFINITY else \
        f"ulimit -f is {soft // 1024} blocks of 1 KiB"


def storage_line(e: BaseException, workdir=None) -> str | None:
    """The one line for a storage failure in e's chain (None when there is none)."""
    found = storage_errno(e)
    if found is None:
        return None
    code, path = found
    _, problem, fix = _STORAGE[code]
    where = f" {path}" if path else f" under {workdir}" if workdir else ""
    problem = problem.format(where=where, path=path or workdir or "the output directory",
                             limit=_file_size_limit() if code == errno.EFBIG else "")
    return f"{problem}; {fix}, {_RESUME}"


_PEER_TEXT = ("Gloo ", "Connection reset by peer", "Connection closed by peer",
              "coordination service", "Socket closed")


def peer_failure(e: BaseException) -> bool:
    """True when e's chain says another process of a multi-process run went away (a collective
    failed on a closed connection, the coordination service is unreachable)."""
    return any(any(t in str(x) for t in _PEER_TEXT) for x in _chain(e))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def one_line(e: BaseException, workdir=None) -> str:
    """The problem and the fix, in one line."""
    if isinstance(e, KeyboardInterrupt):
        return "interrupted; re-run the same command to resume from the last checkpoint."
    storage = storage_line(e, workdir)
    if storage and not isinstance(e, UserError):
        named = next((x for x in _chain(e) if isinstance(x, UserError)), None)
        return _first_line(named) if named else storage  # e.g. the save that failed first
    user = (UserError, ValueError, FileNotFoundError, FileExistsError, FloatingPointError,
            NotADirectoryError)
    if isinstance(e, user):
        return _first_line(e)
    return (f"unexpected {type(e).__name__}: {_first_line(e)[:300]} (a bug or an environment "
            "problem; the log has the traceback to report).")


def as_dir(workdir):
    """A workdir as a path object: local paths absolute (pathlib), gs://... kept (etils.epath)."""
    if workdir is None:
        return None
    if "://" in str(workdir):
        from etils import epath

        return epath.Path(str(workdir))
    return Path(workdir).absolute()


def _has_checkpoints(workdir) -> bool:
    d = workdir / contract.CHECKPOINTS
    return d.is_dir() and any(p.name.isdigit() for p in d.iterdir())


def fallback_log_dir() -> Path:
    """Where logs go when the workdir cannot take them: $TMPDIR/linscale_jax-logs."""
    return Path(tempfile.gettempdir()) / "linscale_jax-logs"


def write_log(workdir, command: str, e: BaseException) -> Path:
    """The traceback (and captured output) in DIR/logs/, else in fallback_log_dir() (a read-only or
    full workdir); returns the file written."""
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    body = (f"command: {' '.join(sys.argv)}\n\n{text}\n"
            + "".join(f"\n--- captured output ---\n{n}" for n in NOISE))
    name = f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    workdir = as_dir(workdir)
    bases = [workdir / contract.LOGS] if workdir is not None and workdir.is_dir() else []
    for base in bases + [fallback_log_dir()]:
        try:
            base.mkdir(parents=True, exist_ok=True)
            (base / name).write_text(body)
            return base / name
        except OSError:
            continue
    raise OSError(f"no writable log directory among {bases + [fallback_log_dir()]}")


CONSOLE = {"stream": None, "prefix": ""}  # set by linscale_jax.dist.supervise in multi-process runs


def print_error(text: str) -> None:
    """Print `ERROR: <text>` as the command's one line (on the console, with the process prefix)."""
    sys.stdout.flush()
    print(f"ERROR: {CONSOLE['prefix']}{text}", file=CONSOLE["stream"] or sys.stderr, flush=True)


def _wait_for_peer_verdict() -> None:
    """A collective failed because another process went away: JAX's coordination service names
    that process within its heartbeat timeout and aborts this process; its supervisor turns that
    into the line (linscale_jax.dist.supervise). Wait for it, bounded, then leave to the supervisor."""
    sys.stderr.flush()
    time.sleep(float(os.environ.get("LINSCALE_PEER_TIMEOUT") or 60))
    os._exit(75)


def _native_to_noise() -> None:
    """For the rest of the process: file descriptor 2 (native logs of TensorStore, gRPC, XLA) goes
    to a temporary file whose text joins NOISE; Python's sys.stderr stays on the console."""
    if os.environ.get("LINSCALE_VERBOSE_STARTUP") or os.environ.get("LINSCALE_SUPERVISED"):
        return  # asked for, or already routed to the process's log (linscale_jax.dist.supervise)
    sys.stderr.flush()
    console = os.fdopen(os.dup(2), "w", buffering=1)
    tmp = tempfile.TemporaryFile()
    os.dup2(tmp.fileno(), 2)
    sys.stderr = console
    _NATIVE.append(tmp)


_NATIVE: list = []


def _native_text() -> str:
    for f in _NATIVE:
        f.seek(0)
        text = f.read().decode(errors="replace")
        f.seek(0, 2)
        if text.strip():
            return text
    return ""


def run(fn, workdir=None, command: str = "command", native_to_log: bool = False) -> int:
    """Call fn(); on failure print one line (see the module docstring) and return 1.
    native_to_log (an entry point's own process): native stderr output goes to the failure log."""
    workdir = as_dir(workdir) if workdir else None
    existed = workdir is not None and workdir.exists()
    if native_to_log and not _NATIVE:
        _native_to_noise()
    install_log_capture()
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
    try:
        return int(fn() or 0)
    except SystemExit:
        raise
    except Stopped as e:
        sys.stderr.flush()
        print(str(e), flush=True)
        return 0
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - the one place errors become lines
        if os.environ.get("LINSCALE_SUPERVISED") and peer_failure(e):
            sys.stderr.flush()  # the traceback to this process's log (file descriptor 2)
            os.write(2, "".join(traceback.format_exception(type(e), e, e.__traceback__)).encode())
            _wait_for_peer_verdict()
        msg = one_line(e, workdir)
        log = None
        native = _native_text()
        if native:
            NOISE.append(native)
        if workdir is not None and not existed and workdir.exists() \
                and not _has_checkpoints(workdir):
            if isinstance(workdir, Path):  # a failed start leaves no empty workdir
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    workdir.rmtree()
        with contextlib.suppress(OSError):  # a refusal's log goes outside the untouched workdir
            log = write_log(None if isinstance(e, Refusal) else workdir, command, e)
        print_error(msg + (f" [traceback: {log}]" if log else ""))
        return 130 if isinstance(e, KeyboardInterrupt) else 1
