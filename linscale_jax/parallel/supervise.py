"""One console per multi-process run, and one line for every way a process of it can stop.

    supervise.maybe_supervise("train")     # first thing of a multi-process entry point

With several processes (--num_processes / $LINSCALE_NUM_PROCESSES > 1, or a TPU slice, SLURM or
Open MPI job), each process of the command runs as a supervisor (standard library only, no JAX)
and its child, the command itself:
  - the child's file descriptors 1 and 2 go to its log, $TMPDIR/linscale_jax-logs/<command>-<time>-
    p<id>-<pid>.log: native output (Gloo's connection lines, XLA and absl logs, C++ check failures,
    faulthandler's thread dumps). Process 0 keeps Python's stdout/stderr on the console (progress);
    the other processes print only their own errors there, as `ERROR: [process I] ...`;
  - when JAX's coordination service stops the child (a peer died or never registered: see
    linscale_jax.parallel.peers for the bound), or a signal kills it, the supervisor prints ONE line
    naming the process that died or never came, the checkpoint a re-run resumes from and the
    command; it moves the child's log to DIR/logs/ (or leaves it in the fallback directory) and
    names it; it removes the child's DIR/train.lock;
  - SIGTERM to the supervisor reaches the child (which saves and exits 0); Ctrl-C reaches both
    from the terminal and the supervisor leaves it to the child; the child dies with its supervisor.
A child that exits by itself (done, or its own one-line error) exits the supervisor with its status;
its log is removed after a clean exit.
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

from linscale_jax import console, contract
from linscale_jax.parallel import peers

SUPERVISED_ENV = "LINSCALE_SUPERVISED"  # set in the child: its log file
PEER_LOST_RC = 75  # the child gave up waiting on a lost peer (await_peer_verdict)


def _flag(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def launch(argv: list[str]) -> tuple[int, int, str | None] | None:
    """(num_processes, process_id, coordinator address) of a multi-process launch, else None."""
    env = os.environ

    def pick(flag, *names):
        v = _flag(argv, flag)
        for name in names:
            v = v if v not in (None, "") else env.get(name)
        return v

    n = pick("num_processes", "LINSCALE_NUM_PROCESSES", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")
    if n is None and env.get("TPU_WORKER_HOSTNAMES"):
        n = len([h for h in env["TPU_WORKER_HOSTNAMES"].split(",") if h])
    pid = pick("process_id", "LINSCALE_PROCESS_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
               "TPU_WORKER_ID")
    try:
        n, pid = int(n or 1), int(pid or 0)
    except ValueError:
        return None  # the command itself reports the bad value
    addr = pick("coordinator_address", "LINSCALE_COORDINATOR_ADDRESS", "JAX_COORDINATOR_ADDRESS")
    return (n, pid, addr) if n > 1 else None


def maybe_supervise(command: str, argv: list[str] | None = None) -> None:
    """In a multi-process launch: in the child, route the console (module docstring) and return;
    otherwise become the supervisor and exit with the child's status. Single process: nothing."""
    argv = list(sys.argv if argv is None else argv)
    found = launch(argv)
    if found is None or console.CONSOLE["stream"] is not None:  # single process, or routed
        return
    n, pid, addr = found
    if os.environ.get(SUPERVISED_ENV):
        _route_console(pid, os.environ[SUPERVISED_ENV])
        return
    try:
        t = peers.timeout_s(_flag(argv, "peer_timeout"))
    except peers.PeerTimeoutError as e:
        console.print_error(str(e))
        sys.exit(2)
    sys.exit(_supervise(command, argv, n, pid, addr, t))


def _route_console(pid: int, log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    out, err = os.dup(1), os.dup(2)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    terminal = os.fdopen(err, "w", buffering=1)
    if pid == 0:
        sys.stdout, sys.stderr = os.fdopen(out, "w", buffering=1), _Console(terminal)
    else:
        os.close(out)
        sys.stdout = sys.stderr = os.fdopen(os.dup(1), "w", buffering=1)
    console.CONSOLE.update(stream=terminal, prefix=f"[process {pid}] ")


class _Console:
    """Process 0's sys.stderr: Python writes reach the console; users of the file descriptor
    (faulthandler's thread dumps, enabled by absl on sys.stderr) get the log (fd 2)."""

    def __init__(self, stream):
        self._stream = stream

    def fileno(self) -> int:
        return 2

    def __getattr__(self, name):
        return getattr(self._stream, name)


def await_peer_verdict(e: BaseException) -> None:
    """In a supervised child whose failure says a peer went away (a collective failed because
    another process died): the traceback goes to this process's log, and the process waits for
    JAX's coordination service to name the lost process and abort it (within its heartbeat
    timeout); the supervisor turns that into the line. Bounded: exit PEER_LOST_RC after the peer
    timeout. Otherwise (not supervised, another failure) this returns."""
    if not os.environ.get(SUPERVISED_ENV) or not peers.peer_failure(e):
        return
    sys.stderr.flush()
    os.write(2, "".join(traceback.format_exception(type(e), e, e.__traceback__)).encode())
    time.sleep(float(os.environ.get(peers.TIMEOUT_ENV) or peers.DEFAULT_TIMEOUT_S))
    os._exit(PEER_LOST_RC)


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass


def _supervise(command, argv, n, pid, addr, t) -> int:
    logs = console.fallback_log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    native = logs / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-p{pid}-{os.getpid()}.log"
    env = dict(os.environ, **{SUPERVISED_ENV: str(native), peers.TIMEOUT_ENV: str(t),
                              peers.LAUNCH_TIME_ENV: str(time.time())})
    child = subprocess.Popen([sys.executable, *sys.orig_argv[1:]], env=env,
                             preexec_fn=_die_with_parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C reaches the child too
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, lambda s, _f: child.poll() is None and child.send_signal(s))
    rc = child.wait()
    if rc == 0:
        native.unlink(missing_ok=True)
        return 0
    if rc > 0 and rc != PEER_LOST_RC:
        return rc  # the child printed its own line
    text = native.read_text(errors="replace") if native.exists() else ""
    workdir = _flag(argv, "workdir")
    _release_lock(workdir, child.pid)
    log = _keep_log(native, workdir)
    line = explain(text, rc, pid, n, addr, t, _resume(workdir, argv, command))
    console.CONSOLE["prefix"] = f"[process {pid}] "
    console.print_error(f"{line} [log: {log}]")
    return 1


def explain(text, rc, pid, n, addr, t, resume) -> str:
    if peers.diagnose(text, pid, n) is None and rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        return (f"this process was stopped by {name} (kill, out of memory, or a crash: the log "
                f"has its last output); {resume}")
    return peers.explain(text, pid, n, addr, t, resume,
                         coordinator_up=_answers(addr) if pid != 0 else None)


def _answers(addr: str | None) -> bool:
    if not addr or ":" not in addr:
        return False
    host, port = addr.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
            return True
    except (OSError, ValueError):
        return False


def _newest_checkpoint(workdir: str | None) -> Path | None:
    if not workdir or "://" in workdir:
        return None
    d = Path(workdir).absolute() / contract.CHECKPOINTS
    steps = [int(p.name) for p in d.glob("*") if p.name.isdigit()
             and (p / contract.CHECKPOINT_METADATA).is_file()] if d.is_dir() else []
    return d / str(max(steps)) if steps else None


def _resume(workdir, argv, command) -> str:
    cmd = shlex.join(["python", *sys.orig_argv[1:]])
    if command != "train":
        return f"re-run: {cmd}"
    newest = _newest_checkpoint(workdir)
    start = f"it resumes from {newest}" if newest else "it starts over (no checkpoint yet)"
    return f"{start}: {cmd}"


def pid_alive(pid: int) -> bool:
    """A live process (a zombie, e.g. a killed process no parent has reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return True


def _release_lock(workdir: str | None, pid: int) -> None:
    """Remove DIR/train.lock when its holder was the child or is a dead process on this host (a lock
    of a process on another host goes stale by its heartbeat: linscale_jax.run.lock)."""
    if not workdir or "://" in workdir:
        return
    lock = Path(workdir).absolute() / contract.LOCK
    try:
        holder = json.loads(lock.read_text())
        held = int(holder.get("pid", -1))
        if holder.get("host") == socket.gethostname() and (held == pid or not pid_alive(held)):
            lock.unlink()
    except (OSError, ValueError, AttributeError, TypeError):
        pass


def _keep_log(native: Path, workdir: str | None) -> Path:
    """The child's log moved into DIR/logs/ when that is writable, else where it is."""
    if not workdir or "://" in workdir or not native.exists():
        return native
    try:
        dst = Path(workdir).absolute() / contract.LOGS
        if not dst.parent.is_dir():
            return native
        dst.mkdir(exist_ok=True)
        return Path(shutil.move(str(native), dst / native.name))
    except OSError:
        return native
