"""One writer per workdir: an exclusive lock file DIR/train.lock holding the writer's host and pid.

    with workdir_lock.hold(workdir):      # raises WorkdirLockedError naming the holder
        ...train...

The lock is an fcntl.flock on DIR/train.lock (released by the kernel when the process dies, so a
kill -9 never leaves a lock behind on a local disk) whose content names the holder:
{"host", "pid", "started", "heartbeat"}. On file systems where flock is not shared between hosts,
the content decides: a lock from a live process on this host, or from another host whose heartbeat
(refreshed every HEARTBEAT_S by a daemon thread) is younger than STALE_S, is held; on an object store
(gs://…, no flock at all) only the content decides; a lock from a dead
pid on this host, or with an old heartbeat, is stale and taken over with one line saying so.
Readers (eval, generate) never take the lock, so they may run beside a trainer. In multi-process
runs only process 0 takes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from etils import epath
from linscale_jax import contract
from linscale_jax.dist.supervise import pid_alive
from linscale_jax.errors import Refusal

LOCK_NAME = contract.LOCK
HEARTBEAT_S = 30.0
STALE_S = 300.0


class WorkdirLockedError(Refusal, RuntimeError):
    """Another trainer holds the workdir."""


def read_holder(workdir) -> dict | None:
    try:
        return json.loads((epath.Path(workdir) / LOCK_NAME).read_text())
    except (OSError, ValueError):
        return None


def _describe(h: dict) -> str:
    return f"pid {h.get('pid')} on {h.get('host')} (since {h.get('started')})"


def _held_by_other(h: dict | None) -> bool:
    if not h or (h.get("host") == socket.gethostname() and h.get("pid") == os.getpid()):
        return False
    if h.get("host") == socket.gethostname():
        return pid_alive(int(h.get("pid", -1)))
    return time.time() - float(h.get("heartbeat", 0)) < STALE_S


def _refusal(workdir, h: dict) -> WorkdirLockedError:
    return WorkdirLockedError(
        f"{workdir} is being trained by {_describe(h)}; wait for it or stop it (kill "
        f"{h.get('pid')} on {h.get('host')}), or use another --workdir. (Eval may run beside it.)")


def _remote(workdir) -> bool:
    return "://" in str(workdir)


def check_free(workdir) -> None:
    """Raise WorkdirLockedError if a live trainer holds `workdir` (reads only)."""
    path = epath.Path(workdir) / LOCK_NAME
    if not path.exists():
        return
    h = read_holder(workdir)
    if _remote(workdir):
        if _held_by_other(h):
            raise _refusal(workdir, h)
        return
    try:
        with open(path, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
    except BlockingIOError:
        raise _refusal(workdir, h or {}) from None
    except OSError:
        pass
    if _held_by_other(h):
        raise _refusal(workdir, h)


@contextlib.contextmanager
def hold(workdir, enabled: bool = True):
    """Take the workdir's lock for the duration of the block (no-op when not enabled)."""
    if not enabled:
        yield None
        return
    path = epath.Path(workdir) / LOCK_NAME
    fd = None if _remote(workdir) else os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _refusal(workdir, read_holder(workdir) or {}) from None
    h = read_holder(workdir)
    if _held_by_other(h):
        if fd is not None:
            os.close(fd)
        raise _refusal(workdir, h)
    if h and not (h.get("host") == socket.gethostname() and h.get("pid") == os.getpid()):
        print(f"Took over a stale lock of {_describe(h)} on {workdir}.", flush=True)
    me = dict(host=socket.gethostname(), pid=os.getpid(),
              started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), heartbeat=time.time())

    def write():
        me["heartbeat"] = time.time()
        data = json.dumps(me).encode()
        if fd is None:  # object store: whole-object write, the content is the lock
            path.write_bytes(data)
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    write()
    stop = threading.Event()

    def beat():
        while not stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                write()

    thread = threading.Thread(target=beat, daemon=True, name="workdir-lock-heartbeat")
    thread.start()
    try:
        yield me
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            if read_holder(workdir) == me or read_holder(workdir) is None:
                path.unlink()
        if fd is not None:
            os.close(fd)
