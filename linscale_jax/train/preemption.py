"""Preemption: SIGTERM or a first Ctrl-C saves a checkpoint at a step every process agrees on, then
the run exits 0; a second Ctrl-C interrupts at once.

    with Preemption() as p:
        ... each step s:  if p.reached(s, at_sync): save, stop

Several processes with JAX's preemption sync service (what jax.distributed starts): JAX's own
SIGTERM handler notes the signal, the coordinator passes the notice to every process, and
`reached_preemption_sync_point(s)` turns True on all of them at the same step (the step after the
fastest process's current one). The call is host-side: no device collective, no wait on the
devices. Ctrl-C is handed to the service as a SIGTERM to this process.
One process: the Python handlers' flag, read every step.
Several processes without the service (jax_enable_preemption_service off): the flag is OR-ed over
processes at the steps that fetch metrics anyway (`at_sync`), so those runs stop at such a step.
"""

from __future__ import annotations

import os
import signal

import jax

from linscale_jax.dist import distributed


class Preemption:
    def __init__(self):
        self.received, self.name, self._old, self.service = False, None, {}, False

    def __enter__(self):
        self.service = distributed.preemption_service()
        # with the service, SIGTERM stays with JAX's handler (installed by jax.distributed)
        for sig in (signal.SIGINT,) if self.service else (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, _frame):
        if self.received and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received, self.name = True, signal.Signals(signum).name
        if self.service:
            os.kill(os.getpid(), signal.SIGTERM)  # to JAX's handler: every process hears of it

    def reached(self, step: int, at_sync: bool) -> bool:
        """Whether to save and stop after `step`: the same answer on every process. Call it at
        every step with the same step numbers on every process."""
        if self.service:
            return distributed.reached_preemption_sync_point(step)
        if jax.process_count() == 1:
            return self.received
        return at_sync and distributed.any_process(self.received)

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            if old is not None:
                signal.signal(sig, old)
