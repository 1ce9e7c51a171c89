"""SIGTERM and SIGINT stop a command once, however many arrive.

    signals.install()                    # an entry point, first thing (before the heavy imports)
    with signals.running() as early:     # the command wrapper (linscale_jax.run.command)
        ...
    with signals.deferred() as stop:     # a section that stops at its own safe points
        ... each step: if stop.name: save, break ...

One stop per command: the first SIGTERM or SIGINT decides, every later one is ignored, so a
second or third signal (or Ctrl-C pressed twice) never interrupts a save, a clean-up or the
interpreter's exit. Where the first one lands:
  - before the command's body starts: `running()` yields its name and the wrapper stops at once;
  - inside a `deferred()` section (the trainer's step loop, the study's wait for its workers):
    `stop.name` is set and `on_stop(signum)` is called; the section stops at its next safe point;
  - elsewhere in the body: `Interrupted` (a KeyboardInterrupt whose str is the signal's name) is
    raised in the main thread; the command catches it, or the wrapper prints the stop line.
After the body, a process whose entry point called `install()` ignores both signals to its exit
(the interpreter's own shutdown restores default handlers, which would end it by the signal).
Called as a library (a test, a notebook), `running()` and `deferred()` take the signals for their
duration only, then restore the handlers they found and forget the stop.
"""

from __future__ import annotations

import contextlib
import signal
import types

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """The first SIGTERM or SIGINT while a command runs outside a deferred section."""


_STATE = types.SimpleNamespace(name=None, running=False, owned=False, sections=[])


def _handle(signum, _frame) -> None:
    if _STATE.name is not None:
        return  # one stop per command
    _STATE.name = signal.Signals(signum).name
    if _STATE.sections:
        section = _STATE.sections[-1]
        section.name = _STATE.name
        if section.on_stop is not None:
            section.on_stop(signum)
    elif _STATE.running:
        raise Interrupted(_STATE.name)


def _take(sigs) -> dict:
    """Install the handler for `sigs` (main thread only); returns the handlers it replaced."""
    previous = {}
    with contextlib.suppress(ValueError):  # not the main thread
        for sig in sigs:
            previous[sig] = signal.signal(sig, _handle)
    return previous


def _restore(previous: dict) -> None:
    for sig, old in previous.items():
        signal.signal(sig, signal.SIG_DFL if old is None else old)  # None: not set from Python


def install() -> None:
    """This process is a command: it takes SIGTERM and SIGINT until it exits."""
    _STATE.owned = True
    _take(SIGNALS)


def received() -> str | None:
    """The name of the first signal of this command (None: none yet)."""
    return _STATE.name


@contextlib.contextmanager
def running():
    """The command's body: yields the name of a signal that came before it (None: none)."""
    previous = None if _STATE.owned else {sig: signal.getsignal(sig) for sig in SIGNALS}
    _take(SIGNALS)
    _STATE.running = True
    try:
        yield _STATE.name
    finally:
        _STATE.running = False
        if previous is None:
            with contextlib.suppress(ValueError):
                for sig in SIGNALS:
                    signal.signal(sig, signal.SIG_IGN)
        else:
            _restore(previous)
            _STATE.name = None


@contextlib.contextmanager
def deferred(on_stop=None, sigs=SIGNALS):
    """A section that reads `stop.name` at its own safe points instead of being interrupted
    (`sigs`: the signals it takes when they are not taken already)."""
    mine = [sig for sig in sigs if signal.getsignal(sig) is not _handle]
    previous = _take(mine) if mine else {}
    section = types.SimpleNamespace(name=_STATE.name, on_stop=on_stop)
    _STATE.sections.append(section)
    try:
        yield section
    finally:
        _STATE.sections.remove(section)
        if previous:
            _restore(previous)
            if not _STATE.running:
                _STATE.name = None
