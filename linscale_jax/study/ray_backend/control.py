"""The driver's mailbox on Ray (study.ray_backend): one actor on the head node that the driver and
every run's host tasks (study.ray_backend.task) talk through.

    control = ray.remote(Control).options(num_cpus=0, resources={"node:__internal_head__": 0.001}).remote()
    stopping = control.beat.remote((run, attempt, host), info)   # a host task, every BEAT_S
    events, beats = control.drain.remote()                       # the driver, every second

It holds the stop request (the driver's Ctrl-C or SIGTERM; every run's process watches it), the
runs' start events (drained by the driver for its "started" lines), the gangs' JAX coordinator
addresses (published by host 0, read by the others) and every host task's heartbeat: the age of
each host's last beat, measured on the actor's own clock when the driver drains, so an actor that
answers late (a loaded head node) delays the beats and their judgement alike and never makes a
live host look silent (study.ray_backend.gang: the deadline).
"""

from __future__ import annotations

import time

BEAT_S = 1.0  # a host task's heartbeat interval (it also carries the stop request back)
# A call the actor has not answered: after CONTROL_WARN_S the driver says so once and goes on
# waiting (a loaded head node answers late; a lost actor or node raises at once, study.ray_backend.
# own_node); only after CONTROL_PATIENCE_S does the study end (a live actor that never answers).
CONTROL_WARN_S = 120.0
CONTROL_PATIENCE_S = 1800.0


class Control:
    """The driver's mailbox (a Ray actor on the head node): the stop request, the runs' start
    events, the gangs' coordinator addresses, the host tasks' heartbeats."""

    def __init__(self):
        self._stop, self._events, self._kv, self._beats = False, [], {}, {}

    def request_stop(self) -> None:
        self._stop = True

    def stopping(self) -> bool:
        return self._stop

    def beat(self, key: tuple, info: dict) -> bool:
        """A host task is alive: `key` (run, attempt, host), `info` (node, ip, host, pid, pid_start);
        returns the stop request."""
        self._beats[key] = (time.monotonic(), info)
        return self._stop

    def event(self, item) -> None:
        self._events.append(item)

    def drain(self) -> tuple[list, dict]:
        """(the events since the last drain, {(run, attempt, host): (seconds since its last beat,
        info)})."""
        t = time.monotonic()
        out, self._events = self._events, []
        return out, {k: (t - s, info) for k, (s, info) in self._beats.items()}

    def forget(self, run: str, attempt: int) -> None:
        """Drop the heartbeats of an attempt that has ended."""
        self._beats = {k: v for k, v in self._beats.items() if k[:2] != (run, attempt)}

    def put(self, key, value) -> None:
        self._kv[key] = value

    def get(self, key):
        return self._kv.get(key)
