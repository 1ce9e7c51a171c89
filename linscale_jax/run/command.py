"""How every command runs: one line for a failure or a stop, the traceback in a log.

    from linscale_jax.run import command
    sys.exit(command.run(lambda: main(...), workdir=DIR, command="train"))

`run` calls the command. On an exception it prints ONE line to stderr, `ERROR: <problem>; <fix>`,
and writes the traceback (plus the library output linscale_jax.console kept off the console) to
DIR/logs/<command>-<time>-<pid>.log, naming that file on the same line; exit status 1. A
`Refusal` (the command changed nothing) and a workdir that does not exist or cannot be written
put the log in $TMPDIR/linscale_jax-logs/ instead, so a refused workdir stays byte-identical. A
gs://... workdir stays one (etils.epath): its log goes to gs://.../logs/. A storage failure
anywhere in the exception chain gets its own line (linscale_jax.run.storage), and so does a module
of an optional extra that is not installed: the extra and its pip line (linscale_jax.run.extras).
A stop (linscale_jax.run.signals: SIGTERM or Ctrl-C, any number of them; `Stopped`, raised by a
command that saved what it had) prints one line without ERROR: and exits 0. argparse commands use
linscale_jax.errors.ArgumentParser for the same one-line usage error (rc 2).
In a multi-process run a failure that says a peer went away is left to the process's supervisor
(linscale_jax.parallel.supervise), whose line names the lost process.
`run` removes nothing: a workdir is removed only by the trainer that created it, while it holds
the lock (linscale_jax.run.lock.claim).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from pathlib import Path

from linscale_jax import console, contract
from linscale_jax.parallel import supervise
from linscale_jax.errors import Refusal, Stopped, UserError, chain
from linscale_jax.run import extras, signals, storage


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def one_line(e: BaseException, workdir=None, command: str = "command") -> str:
    """The problem and the fix, in one line."""
    line = storage.storage_line(e, workdir, command)
    if line and not isinstance(e, UserError):
        named = next((x for x in chain(e) if isinstance(x, UserError)), None)
        return _first_line(named) if named else line  # e.g. the save that failed first
    extra = extras.missing_line(e)  # a module of an optional extra: the extra and its pip line
    if extra:
        return extra
    user = (UserError, ValueError, FileNotFoundError, FileExistsError, FloatingPointError,
            NotADirectoryError)
    if isinstance(e, user):
        return _first_line(e)
    return (f"unexpected {type(e).__name__}: {_first_line(e)[:300]} (a bug or an environment "
            "problem; the log has the traceback to report).")


def stop_line(e: BaseException, command: str) -> str:
    """The line of a stop that no command turned into a Stopped."""
    if isinstance(e, signals.Interrupted):
        return f"{e}: {command} stopped; re-run the same command to continue."
    return _first_line(e) if str(e).strip() else \
        f"{command} interrupted; re-run the same command to continue."


def as_dir(workdir):
    """A workdir as a path object: local paths absolute (pathlib), gs://... kept (etils.epath)."""
    if workdir is None:
        return None
    if "://" in str(workdir):
        from etils import epath

        return epath.Path(str(workdir))
    return Path(workdir).absolute()


def write_log(workdir, command: str, e: BaseException) -> Path:
    """The traceback (and captured output) in DIR/logs/, else in the fallback directory (a
    read-only or full workdir, a refusal); returns the file written."""
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    body = (f"command: {' '.join(sys.argv)}\n\n{text}\n"
            + "".join(f"\n--- captured output ---\n{n}" for n in console.NOISE))
    name = f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    workdir = as_dir(workdir)
    bases = [workdir / contract.LOGS] if workdir is not None and workdir.is_dir() else []
    for base in bases + [console.fallback_log_dir()]:
        try:
            base.mkdir(parents=True, exist_ok=True)
            (base / name).write_text(body)
            return base / name
        except OSError:
            continue
    raise OSError(f"no writable log directory among {bases + [console.fallback_log_dir()]}")


def run(fn, workdir=None, command: str = "command", native_to_log: bool = False) -> int:
    """Call fn(); a failure is one line and exit status 1, a stop one line and 0 (module
    docstring). native_to_log (an entry point's own process): native stderr goes to the log."""
    workdir = as_dir(workdir) if workdir else None
    with signals.running() as early:
        if early:  # a signal while the command was loading: stop before it starts
            print(f"{early}: {command} stopped before it started; re-run the same command.",
                  flush=True)
            return 0
        return _call(fn, workdir, command, native_to_log)


def _call(fn, workdir, command: str, native_to_log: bool) -> int:
    if native_to_log:
        console.native_to_noise()
    console.capture_library_noise()
    try:
        return int(fn() or 0)
    except SystemExit:
        raise
    except Stopped as e:
        sys.stderr.flush()
        print(str(e), flush=True)
        return 0
    except KeyboardInterrupt as e:
        sys.stderr.flush()
        print(stop_line(e, command), flush=True)
        return 0
    except Exception as e:  # noqa: BLE001 - the one place errors become lines
        if signals.raised():  # a library's failure around the stop's interruption: the stop
            sys.stderr.flush()
            print(stop_line(signals.Interrupted(signals.received()), command), flush=True)
            return 0
        supervise.await_peer_verdict(e)
        native = console.native_text()
        if native:
            console.NOISE.append(native)
        log = None
        with contextlib.suppress(OSError):  # a refusal's log goes outside the untouched workdir
            log = write_log(None if isinstance(e, Refusal) else workdir, command, e)
        console.print_error(one_line(e, workdir, command) + (f" [traceback: {log}]" if log else ""))
        return 1
