"""The driver's mailbox on Ray (study.ray_backend): one actor on the head node that the driver and
every run's host tasks (study.ray_backend.task) talk through.

    control = ray.remote(Control).options(num_cpus=0, resources={"node:__internal_head__": 0.001}).remote()

It holds the stop request (the driver's Ctrl-C or SIGTERM; every run's process watches it), the
runs' start events (drained by the driver for its "started" lines) and the gangs' JAX coordinator
addresses (published by host 0, read by the others).
"""

from __future__ import annotations


class Control:
    """The driver's mailbox (a Ray actor on the head node): the stop request, the runs' start
    events, the gangs' coordinator addresses."""

    def __init__(self):
        self._stop, self._events, self._kv = False, [], {}

    def request_stop(self) -> None:
        self._stop = True

    def stopping(self) -> bool:
        return self._stop

    def event(self, item) -> None:
        self._events.append(item)

    def drain(self) -> list:
        out, self._events = self._events, []
        return out

    def put(self, key, value) -> None:
        self._kv[key] = value

    def get(self, key):
        return self._kv.get(key)
