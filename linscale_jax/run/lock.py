"""One writer per workdir: an exclusive lock file DIR/train.lock holding the writer's host and pid.

    with workdir_lock.claim(workdir):     # creates DIR if missing; raises WorkdirLockedError
        ...train...                       #   naming the holder

The lock is an fcntl.flock on DIR/train.lock (released by the kernel when the process dies, so a
kill -9 never leaves a lock behind on a local disk) whose content names the holder:
{"host", "pid", "started", "heartbeat"}. On file systems where flock is not shared between hosts,
the content decides: a lock from a live process on this host, or from another host whose heartbeat
(refreshed every HEARTBEAT_S by a daemon thread) is younger than STALE_S, is held; on an object store
(gs://…, no flock at all) only the content decides; a lock from a dead
pid on this host, or with an old heartbeat, is stale and taken over with one line saying so.
Readers (eval, generate) never take the lock, so they may run beside a trainer. In multi-process
runs only process 0 takes it.

`claim` also owns the workdir's removal: a block that fails in a workdir this process created
(its own mkdir, on the path resolved through `..`, symlinks and mounts) removes that workdir again
while still holding the lock, unless a checkpoint was written. Nothing else removes a workdir: a
refused claim, or one whose workdir existed, touches nothing. On an object store (gs://, where
creating is not atomic) a workdir is never removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import threading
import time
from etils import epath
from linscale_jax import contract
from linscale_jax.parallel.supervise import pid_alive
from linscale_jax.errors import Refusal

LOCK_NAME = contract.LOCK
HEARTBEAT_S = 30.0
STALE_S = 300.0
RELEASE_WAIT_S = 10.0  # a dead holder's flock outlives its pid while its other threads end


class WorkdirLockedError(Refusal, RuntimeError):
    """Another trainer holds the workdir."""


def read_holder(workdir, name: str = LOCK_NAME) -> dict | None:
    """The holder the lock file names; None where it is missing, unreadable or not a JSON object."""
    try:
        h = json.loads((epath.Path(workdir) / name).read_text())
    except (OSError, ValueError):
        return None
    return h if isinstance(h, dict) else None


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


def _flock(f, mode: int, workdir, name: str = LOCK_NAME) -> None:
    """fcntl.flock(f, mode | LOCK_NB); raises BlockingIOError while the lock is held. A holder on
    this host whose pid is already gone or a zombie is still ending: the kernel drops its flock only
    when the last of its threads has exited, which can lag the pid by a moment (a thread
    group leader killed with SIGKILL shows as a zombie while its other threads still unwind). Such
    a lock is retried for up to RELEASE_WAIT_S before it counts as held."""
    deadline = time.time() + RELEASE_WAIT_S
    while True:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            h = read_holder(workdir, name) or {}
            pid = h.get("pid")
            ending = (h.get("host") == socket.gethostname() and isinstance(pid, int) and pid > 0
                      and not pid_alive(pid))
            if not ending or time.time() >= deadline:
                raise
            time.sleep(0.1)


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
            _flock(f, fcntl.LOCK_SH, workdir)
            fcntl.flock(f, fcntl.LOCK_UN)
    except BlockingIOError:
        raise _refusal(workdir, h or {}) from None
    except OSError:
        pass
    if _held_by_other(h):
        raise _refusal(workdir, h)


@contextlib.contextmanager
def hold(workdir, enabled: bool = True, name: str = LOCK_NAME, refusal=_refusal):
    """Take the workdir's lock for the duration of the block (no-op when not enabled). `name`
    and `refusal(workdir, holder)` (the error a held lock raises): another lock of the same kind,
    e.g. a study's (linscale_jax.study.lock)."""
    if not enabled:
        yield None
        return
    path = epath.Path(workdir) / name
    fd = None if _remote(workdir) else os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fd is not None:
            _flock(fd, fcntl.LOCK_EX, workdir, name)
    except BlockingIOError:
        os.close(fd)
        raise refusal(workdir, read_holder(workdir, name) or {}) from None
    h = read_holder(workdir, name)
    if _held_by_other(h):
        if fd is not None:
            os.close(fd)
        raise refusal(workdir, h)
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
            if fd is not None:  # the file this process locked (not one a later trainer made)
                a, b = os.stat(path), os.fstat(fd)
                if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
                    path.unlink()
            elif read_holder(workdir, name) in (me, None):
                path.unlink()
        if fd is not None:
            os.close(fd)


def resolved(workdir):
    """The workdir as the place it is: local paths through `..` and symlinks (os.path.realpath);
    gs://... kept as they are."""
    return epath.Path(workdir) if _remote(workdir) else epath.Path(os.path.realpath(workdir))


def has_checkpoints(workdir) -> bool:
    d = epath.Path(workdir) / contract.CHECKPOINTS
    return d.is_dir() and any(p.name.isdigit() for p in d.iterdir())


_TEST_PAUSE = "LINSCALE_TEST_PAUSE_AFTER_MKDIR"  # the creation race of tests/train/test_nothing_lost.py


def _create(path) -> tuple[int, int] | None:
    """mkdir path (its parents as needed): (st_dev, st_ino) of the directory when this call made
    it, None when it existed (or is remote)."""
    if _remote(path):
        path.mkdir(parents=True, exist_ok=True)
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        return None
    st = os.stat(path)
    hook = os.environ.get(_TEST_PAUSE)
    if hook:  # tests: pause between creating and locking until the file `hook` has content
        deadline = time.time() + 120
        while not (os.path.exists(hook) and os.path.getsize(hook)) and time.time() < deadline:
            time.sleep(0.05)
    return st.st_dev, st.st_ino


def _remove(path, made: tuple[int, int]) -> None:
    """Remove the directory this process made, if `path` still is that directory (device and inode
    compared): renamed aside first (atomic), so a trainer starting now finds no directory, not a
    half-removed one."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return
    if (st.st_dev, st.st_ino) != made:
        return
    aside = path.parent / f".{path.name}.removing-{os.getpid()}"
    try:
        os.rename(path, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def claim(workdir, enabled: bool = True):
    """Create `workdir` if it does not exist and hold its lock for the block; yields the resolved
    path. A block that raises in a workdir this call created, and that holds no checkpoint, leaves
    no workdir (removed while the lock is still held). enabled=False (multi-process runs:
    processes other than 0) only resolves the path."""
    path = resolved(workdir)
    if not enabled:
        yield path
        return
    held = contextlib.ExitStack()
    for attempt in (0, 1):
        made = _create(path)
        try:
            held.enter_context(hold(path))
            break
        except FileNotFoundError:  # its creator removed it between our mkdir and our lock
            if attempt:
                raise
    with held:
        try:
            yield path
        except BaseException:
            if made is not None and not has_checkpoints(path):
                _remove(path, made)
            raise
