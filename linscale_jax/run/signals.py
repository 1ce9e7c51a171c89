"""SIGTERM and SIGINT stop a command once, however many arrive.

    signals.install()                    # an entry point, first thing (before the heavy imports)
    with signals.running() as early:     # the command wrapper (linscale_jax.run.command)
        ...
    with signals.postponed():            # a region a stop must not cut (checkpoint I/O, repairs)
        ...
    with signals.deferred() as stop:     # a section that stops at its own safe points
        ... each step: if stop.name: save, break ...

The first SIGTERM or SIGINT decides; later ones are ignored. In the body it raises `Interrupted`
(a KeyboardInterrupt named after the signal) in the main thread; inside `postponed()` it is raised
when the region ends; inside `deferred()` it sets `stop.name`, calls `on_stop(signum)` and the
section stops at its next safe point. After the body, a process whose entry point called
`install()` ignores both signals to its exit. Called as a library, `running()` and `deferred()`
take the signals for their duration only. Behaviour per command: docs/training.md "Run integrity".
"""

from __future__ import annotations

import contextlib
import signal
import types

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """The first SIGTERM or SIGINT of a command, where the command may be cut."""


# name: the first signal; handled: a deferred section took it; raised: Interrupted was raised;
# stack: the regions entered, innermost last ("raise", "hold" or a deferred section)
_STATE = types.SimpleNamespace(name=None, handled=False, raised=False, owned=False, stack=[])


def _raise() -> None:
    _STATE.raised = True
    raise Interrupted(_STATE.name)


def _handle(signum, _frame) -> None:
    if _STATE.name is not None:
        return  # one stop per command
    _STATE.name = signal.Signals(signum).name
    for region in list(_STATE.stack):
        if not isinstance(region, str):
            region.name = _STATE.name
            if region.on_stop is not None:
                region.on_stop(signum)
    if _STATE.stack and _STATE.stack[-1] == "raise":
        _raise()


def _take(sigs) -> dict:
    """Install the handler for `sigs` (main thread only); returns the handlers it replaced."""
    previous = {}
    with contextlib.suppress(ValueError):  # not the main thread
        for sig in sigs:
            if signal.getsignal(sig) is not _handle:
                previous[sig] = signal.signal(sig, _handle)
    return previous


def _restore(previous: dict) -> None:
    for sig, old in previous.items():
        signal.signal(sig, signal.SIG_DFL if old is None else old)  # None: not set from Python


def _forget() -> None:
    _STATE.name, _STATE.handled, _STATE.raised = None, False, False


def install() -> None:
    """This process is a command: it takes SIGTERM and SIGINT until it exits."""
    _STATE.owned = True
    _take(SIGNALS)


def received() -> str | None:
    """The name of the first signal of this command (None: none yet)."""
    return _STATE.name


def raised() -> bool:
    """Whether Interrupted was raised in this command (what fails after it is the stop's doing)."""
    return _STATE.raised


@contextlib.contextmanager
def running():
    """The command's body: yields the name of a signal that came before it (None: none)."""
    previous = _take(SIGNALS)
    _STATE.stack.append("raise")
    try:
        yield _STATE.name
    finally:
        _STATE.stack.pop()
        if _STATE.owned:
            with contextlib.suppress(ValueError):
                for sig in SIGNALS:
                    signal.signal(sig, signal.SIG_IGN)
        else:
            _restore(previous)
            _forget()


@contextlib.contextmanager
def postponed():
    """A region a stop must not cut: a signal in it raises Interrupted when it ends."""
    _STATE.stack.append("hold")
    try:
        yield
    finally:
        _STATE.stack.pop()
    if _STATE.name and not _STATE.handled and _STATE.stack and _STATE.stack[-1] == "raise":
        _raise()


@contextlib.contextmanager
def deferred(on_stop=None, sigs=SIGNALS):
    """A section that reads `stop.name` at its own safe points (`on_stop(signum)`: called at the
    first signal); `sigs`: the signals it takes when they are not taken already."""
    previous = _take(sigs)
    section = types.SimpleNamespace(name=None if _STATE.handled else _STATE.name, on_stop=on_stop)
    _STATE.stack.append(section)
    try:
        yield section
    finally:
        _STATE.stack.remove(section)
        if section.name:
            _STATE.handled = True
        if previous:
            _restore(previous)
            if not _STATE.stack:
                _forget()
