"""Preemption: a SIGTERM or Ctrl-C saves a checkpoint at a step every process agrees on, then the
run exits 0; later signals change nothing (linscale_jax.run.signals: one stop per process).

    with Preemption() as p:
        ... each step s:  if p.reached(s, at_sync): save, stop

Several processes with JAX's preemption sync service (what jax.distributed starts): JAX's own
SIGTERM handler notes the signal, the coordinator passes the notice to every process, and
`reached_preemption_sync_point(s)` turns True on all of them at the same step (the step after the
fastest process's current one). The call is host-side: no device collective, no wait on the
devices. Ctrl-C is handed to the service as a SIGTERM to this process.
One process: the stop's name, read every step.
Several processes without the service (jax_enable_preemption_service off): the flag is OR-ed over
processes at the steps that fetch metrics anyway (`at_sync`), so those runs stop at such a step.
"""

from __future__ import annotations

import contextlib
import os
import signal

import jax

from linscale_jax.parallel import distributed
from linscale_jax.run import signals


class Preemption:
    def __init__(self):
        self.service, self._stop, self._section = False, None, contextlib.ExitStack()

    def __enter__(self):
        self.service = distributed.preemption_service()
        # with the service, SIGTERM stays with JAX's handler (installed by jax.distributed)
        self._stop = self._section.enter_context(signals.deferred(
            self._to_service if self.service else None,
            (signal.SIGINT,) if self.service else signals.SIGNALS))
        return self

    @staticmethod
    def _to_service(signum):
        if signum == signal.SIGINT:
            os.kill(os.getpid(), signal.SIGTERM)  # to JAX's handler: every process hears of it

    @property
    def received(self) -> bool:
        return self._stop.name is not None

    @property
    def name(self) -> str | None:
        return self._stop.name

    def reached(self, step: int, at_sync: bool) -> bool:
        """Whether to save and stop after `step`: the same answer on every process. Call it at
        every step with the same step numbers on every process."""
        if self.service:
            return distributed.reached_preemption_sync_point(step)
        if jax.process_count() == 1:
            return self.received
        return at_sync and distributed.any_process(self.received)

    def __exit__(self, *exc):
        return self._section.__exit__(*exc)
