"""Peers that die or never come: bounded waits on JAX's coordination service, and what to say.

    kwargs = peers.initialize_kwargs(timeout_s=None)   # for jax.distributed.initialize
    line = peers.explain(native_log_text, process_id, num_processes, coordinator_address)
    peers.peer_failure(exc)   # an exception that says a peer went away

The bound is T = --peer_timeout, else $LINSCALE_PEER_TIMEOUT, else 60 seconds:
  - a process that died (kill -9, a crash, a host that went down) stops sending heartbeats; the
    coordination service declares it dead after 3/4 T and every other process then stops;
  - every process must have registered with the coordinator within T - 5 s of its launch
    ($LINSCALE_LAUNCH_TIME, set by the supervisor), else each one stops naming who is missing
    (the 5 s are for stopping and reporting, so the line comes within T);
  - the shutdown barrier at exit waits at most T.
The stop itself is JAX's (a fatal error in the coordination-service agent); the supervisor of each
process (linscale_jax.parallel.supervise) turns it into one line with `explain`.
Standard library only: the supervisor imports it without JAX.
"""

from __future__ import annotations

import os
import re
import time

from linscale_jax.errors import UserError, chain

DEFAULT_TIMEOUT_S = 60
TIMEOUT_ENV = "LINSCALE_PEER_TIMEOUT"
LAUNCH_TIME_ENV = "LINSCALE_LAUNCH_TIME"
REPORT_S = 5  # of the bound, kept for stopping and reporting after the registration deadline


class PeerTimeoutError(UserError, ValueError):
    """A bad --peer_timeout / $LINSCALE_PEER_TIMEOUT."""


def timeout_s(value=None) -> int:
    """T in seconds (see the module docstring)."""
    raw = value if value is not None else (os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
    try:
        t = int(float(raw))
    except (TypeError, ValueError):
        raise PeerTimeoutError(f"--peer_timeout / ${TIMEOUT_ENV}={raw!r} is not a number of "
                               "seconds; pass e.g. --peer_timeout=60.") from None
    if t < 4:
        raise PeerTimeoutError(f"--peer_timeout={t} is too short for heartbeats; pass at least 4 "
                               "(seconds).")
    return t


def heartbeat_timeout_s(t: int) -> int:
    return max(2, (3 * t) // 4)


def initialize_kwargs(value=None) -> dict:
    """The timeouts of jax.distributed.initialize for the bound T."""
    t = timeout_s(value)
    launched = float(os.environ.get(LAUNCH_TIME_ENV) or time.time())
    left = int(t - REPORT_S - (time.time() - launched))
    return dict(initialization_timeout=max(3, left), heartbeat_timeout_seconds=heartbeat_timeout_s(t),
                shutdown_timeout_seconds=t)


_PEER_TEXT = ("Gloo ", "Connection reset by peer", "Connection closed by peer",
              "coordination service", "Socket closed")


def peer_failure(e: BaseException) -> bool:
    """True when e's chain says another process of a multi-process run went away (a collective
    failed on a closed connection, the coordination service is unreachable)."""
    return any(any(t in str(x) for t in _PEER_TEXT) for x in chain(e))


_UNHEALTHY = re.compile(r"stopped sending heartbeats\)?:?\s*((?:[\d/:a-z_]+[\s,]*)+)", re.I)
_TASK = re.compile(r"task:(\d+)")


def _unhealthy(text: str) -> list[int]:
    out = []
    for m in _UNHEALTHY.finditer(text):
        block = m.group(1)
        out += [int(x) for x in (_TASK.findall(block) or re.findall(r"\b(\d+)\b", block))]
    return sorted(set(out))


def diagnose(text: str, process_id: int, num_processes: int) -> tuple[str, list[int]] | None:
    """(kind, processes) from a stopped process's native output: kind is "died" (the processes
    stopped sending heartbeats), "coordinator" (process 0, the coordinator, went away) or
    "unregistered" (the processes that never registered); None when the text says neither."""
    others = [i for i in range(num_processes) if i != process_id]
    dead = _unhealthy(text)
    if dead:
        return "died", [d for d in dead if d != process_id] or dead
    if "RegisterTask" in text and ("DEADLINE_EXCEEDED" in text or "Deadline Exceeded" in text):
        return "unregistered", others if process_id == 0 else [0]
    if process_id != 0 and any(t in text for t in (
            "Failed to send RPC to coordination service", "leader task", "Socket closed",
            "Connection refused", "failed to connect")):
        return "coordinator", [0]
    if "Gloo" in text and ("reset by peer" in text or "closed by peer" in text):
        return "died", others if num_processes == 2 else []
    return None


def _ids(ps: list[int]) -> str:
    return ("process " if len(ps) == 1 else "processes ") + ", ".join(map(str, ps))


def explain(text: str, process_id: int, num_processes: int, coordinator: str | None,
            t: int, resume: str, coordinator_up: bool | None = None) -> str:
    """The problem and the fix, in one line, for a process JAX stopped (see `diagnose`).
    `resume` says what a re-run resumes from and the command; `coordinator_up` (non-0 processes):
    whether the coordinator's port answered."""
    found = diagnose(text, process_id, num_processes)
    kind, who = found if found else ("unknown", [])
    if kind == "unregistered":
        if process_id != 0 and coordinator_up:
            who = [i for i in range(1, num_processes) if i != process_id]
            head = (f"not every process registered with the coordinator {coordinator} within {t} s "
                    f"(one of {_ids(who)} is missing)")
        else:
            head = f"{_ids(who)} never registered with the coordinator {coordinator} within {t} s"
        return (f"{head}; start every process with --coordinator_address={coordinator} "
                f"--num_processes={num_processes} and its own --process_id (0..{num_processes - 1}), "
                f"check that each reaches {coordinator} (address, port, firewall), or raise "
                f"--peer_timeout; {resume}")
    if kind == "coordinator":
        head = f"process 0 (the coordinator, {coordinator}) stopped: it died or its host went down"
    elif kind == "died" and who:
        head = (f"{_ids(who)} stopped sending heartbeats (timeout {heartbeat_timeout_s(t)} s): "
                "killed, crashed or its host went down")
    else:
        head = "another process of this run went away (a collective lost its connection)"
    return (f"{head}; its own console or DIR/logs/ says why. Fix that, then re-run the same "
            f"command on every process: {resume}")
