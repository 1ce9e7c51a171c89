"""User-facing failures in one line; tracebacks and library noise go to a log file.

    import linscale_jax.cli_errors as cli_errors      # first import of a CLI entry point
    sys.exit(cli_errors.run(lambda: main(...), workdir=DIR, command="train"))

`run` calls the command. On an exception it prints ONE line to stderr, `ERROR: <problem>; <fix>`,
and writes the traceback (plus library log records and native start-up output captured meanwhile)
to DIR/logs/<command>-<time>.log, naming that file on the same line. Refusals that leave the
workdir untouched (another trainer holds it, the config changes the run, --init_from on a run
with checkpoints, --resume_step to a missing step) write no log file, so the workdir stays
byte-identical. A workdir the failed command created and left without checkpoints is removed (its
log then goes to $TMPDIR/linscale_jax-logs/). A gs://... workdir stays one (etils.epath): its log
goes to gs://.../logs/. A full disk is recognised anywhere in the exception
chain (errno ENOSPC or TensorStore's "No space left on device").

`quiet_native_stderr()` captures file descriptor 2 while TensorFlow / CUDA stubs load (oneDNN,
cudart, cuInit, absl::InitializeLog lines); the captured text joins the log of a failure.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from linscale_jax import contract
from linscale_jax.errors import Refusal, UserError

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


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def disk_full(e: BaseException) -> bool:
    return any((isinstance(x, OSError) and x.errno == errno.ENOSPC)
               or "No space left on device" in str(x) for x in _chain(e))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def one_line(e: BaseException, workdir=None) -> str:
    """The problem and the fix, in one line."""
    if isinstance(e, KeyboardInterrupt):
        return "interrupted; re-run the same command to resume from the last checkpoint."
    if disk_full(e):
        where = f" under {workdir}" if workdir else ""
        return (f"no space left on device while writing{where}; free disk space (or move the "
                "workdir), then re-run the same command: it resumes from the last complete "
                "checkpoint.")
    user = (UserError, ValueError, FileNotFoundError, FileExistsError, FloatingPointError,
            PermissionError, NotADirectoryError)
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


def write_log(workdir, command: str, e: BaseException) -> Path:
    workdir = as_dir(workdir)
    base = workdir / contract.LOGS if workdir is not None and workdir.is_dir() else \
        Path(tempfile.gettempdir()) / "linscale_jax-logs"
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    path.write_text(f"command: {' '.join(sys.argv)}\n\n{text}\n"
                    + "".join(f"\n--- captured output ---\n{n}" for n in NOISE))
    return path


def run(fn, workdir=None, command: str = "command") -> int:
    """Call fn(); on failure print one line (see the module docstring) and return 1."""
    workdir = as_dir(workdir) if workdir else None
    existed = workdir is not None and workdir.exists()
    install_log_capture()
    try:
        return int(fn() or 0)
    except SystemExit:
        raise
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - the one place errors become lines
        msg = one_line(e, workdir)
        log = None
        if workdir is not None and not existed and workdir.exists() \
                and not _has_checkpoints(workdir):
            if isinstance(workdir, Path):  # a failed start leaves no empty workdir
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    workdir.rmtree()
        if not isinstance(e, Refusal):
            with contextlib.suppress(OSError):
                log = write_log(workdir, command, e)
        sys.stdout.flush()
        print(f"ERROR: {msg}" + (f" [traceback: {log}]" if log else ""), file=sys.stderr,
              flush=True)
        return 130 if isinstance(e, KeyboardInterrupt) else 1
