"""The instruments of bench/step_loop.py: where the trainer's loop spends its CPU seconds.

    clock = Clock()                      # seconds per part (PARTS)
    with instrumented(clock): ...        # the trainer's and eval's parts timed into clock
    compiling = CompileClock()           # CPU seconds tracing, lowering and compiling
    programs = ProgramLog()              # every program lowered and compiled: name, seconds, cache hit

Parts (bench/step_loop.py's docstring says what each holds): step, compile, data, dispatch,
metrics, checkpoint, eval, other.
"""

from __future__ import annotations

import contextlib
import threading
import time

PARTS = ("step", "compile", "data", "dispatch", "metrics", "checkpoint", "eval", "other")

class Clock:
    """Seconds per part, from wrappers around the functions that do each part's work."""

    def __init__(self):
        self.s = dict.fromkeys(PARTS, 0.0)
        self.lock = threading.Lock()

    def add(self, part: str, seconds: float) -> None:
        with self.lock:
            self.s[part] += seconds

    def wrap(self, owner, name: str, part: str, clock=time.thread_time, settle=None, minus=None):
        """owner.name timed into `part` by `clock` (default: the calling thread's CPU time).
        settle(*args) runs first, untimed (a wait for the devices); minus() is a counter whose
        rise during the call is taken off (compilation, a part of its own)."""
        orig = getattr(owner, name)

        def timed(*args, **kw):
            if settle is not None:
                settle(*args)
            t, m = clock(), minus() if minus else 0.0
            try:
                return orig(*args, **kw)
            finally:
                self.add(part, clock() - t - ((minus() - m) if minus else 0.0))

        return owner, name, orig, timed


@contextlib.contextmanager
def instrumented(clock: Clock, compiling=None):
    """The trainer's and eval's parts timed into `clock` (see the module docstring): the calling
    thread's CPU time, or the process's for calls made while the devices are idle (checkpoint
    writes, whose library works on threads of its own). The trainer's checkpoint scoring
    (eval.checkpoint_scores) counts as eval, timed with the devices idle before, less the
    compilation inside (`compiling`: a CompileClock)."""
    import types

    import jax

    from linscale_jax.run import async_save, checksums
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.train import batches, metrics
    from linscale_jax.train import loop as trainer
    try:
        from linscale_jax.train import programs  # the trainer's programs (a checkout before: loop)
    except ImportError:
        programs = trainer

    def ready(*args):
        jax.block_until_ready(args)

    process = time.process_time
    patches = [clock.wrap(batches.GlobalBatches, name, "data") for name in
               ("local", "put", "local_block", "put_block") if hasattr(batches.GlobalBatches, name)]
    patches += [
        clock.wrap(metrics.MetricsLogger, "write", "metrics"),
        clock.wrap(metrics.MetricsLogger, "progress", "metrics"),
        clock.wrap(metrics, "device_memory", "metrics"),
        clock.wrap(jax, "device_get", "metrics", settle=ready),
        clock.wrap(ckpt, "save", "checkpoint", clock=process),
        clock.wrap(async_save.Pending, "wait", "checkpoint", clock=process),
        clock.wrap(checksums, "record", "checkpoint"),
    ]
    try:
        from linscale_jax.eval import checkpoint_scores as scores
    except ImportError:  # a checkout before the trainer scored its checkpoints
        scores = None
    if scores is not None:
        minus = (lambda: compiling.seconds) if compiling is not None else None

        def idle(obj, step, params, meta):
            jax.block_until_ready(params)

        patches += [
            clock.wrap(scores.CheckpointScores, "score", "eval", clock=process, settle=idle,
                       minus=minus),
            clock.wrap(scores.CheckpointScores, "write", "eval", clock=process),
        ]
    compiled = programs._compiled

    def dispatch_timed(key):
        fns = compiled(key)
        timed = {}
        for name in ("step_fn", "block_fn"):  # one step per dispatch, or blocks of steps
            real = getattr(fns, name, None)
            if real is None:
                continue

            def call(*args, real=real):
                t = time.thread_time()
                out = real(*args)
                clock.add("dispatch", time.thread_time() - t)
                return out

            call.lower = real.lower
            timed[name] = call
        return types.SimpleNamespace(**dict(vars(fns), **timed))

    patches.append((programs, "_compiled", compiled, dispatch_timed))
    for owner, name, _, new in patches:
        setattr(owner, name, new)
    try:
        yield
    finally:
        for owner, name, orig, _ in patches:
            setattr(owner, name, orig)


class CompileClock:
    """CPU seconds of this process spent tracing, lowering and compiling (or reading compiled
    programs from the persistent cache): between the start and end events jax records for each
    (jax.monitoring; nested events count once)."""

    EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
              "/jax/core/compile/jaxpr_to_mlir_module_duration",
              "/jax/core/compile/backend_compile_duration")

    def __init__(self):
        import jax

        self.seconds, self._depth, self._t0 = 0.0, 0, 0.0
        jax.monitoring.register_scalar_listener(self._start)
        jax.monitoring.register_event_duration_secs_listener(self._end)

    def _start(self, event: str, value, **_) -> None:
        if event in self.EVENTS and threading.current_thread() is threading.main_thread():
            if self._depth == 0:
                self._t0 = time.process_time()
            self._depth += 1

    def _end(self, event: str, duration: float, **_) -> None:
        if event in self.EVENTS and threading.current_thread() is threading.main_thread():
            self._depth = max(self._depth - 1, 0)
            if self._depth == 0:
                self.seconds += time.process_time() - self._t0


class ProgramLog:
    """Every program this process lowers and compiles, in order: its name, wall seconds per phase
    (lower, compile: XLA's compilation or the persistent cache's read) and whether the persistent
    cache held it (jax.monitoring events; the main thread's)."""

    PHASES = {"/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
              "/jax/core/compile/backend_compile_duration": "compile"}

    def __init__(self):
        import jax

        self.rows, self._hit = [], False
        jax.monitoring.register_event_listener(self._event)
        jax.monitoring.register_event_duration_secs_listener(self._end)

    def _event(self, event: str, **_) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self._hit = True

    def _end(self, event: str, duration: float, fun_name: str = "?", **_) -> None:
        phase = self.PHASES.get(event)
        if phase is None or threading.current_thread() is not threading.main_thread():
            return
        self.rows.append(dict(name=fun_name, phase=phase, s=round(duration, 3),
                              **({"cache_hit": self._hit} if phase == "compile" else {})))
        if phase == "compile":
            self._hit = False

    def since(self, i: int) -> list[dict]:
        """The compilations (phase compile) logged after row i, each with its lowering's seconds
        folded in: [{name, lower, compile, cache_hit}]."""
        out, acc = [], {}
        for r in self.rows[i:]:
            if r["phase"] != "compile":
                acc.setdefault(r["name"], {}).setdefault(r["phase"], 0.0)
                acc[r["name"]][r["phase"]] += r["s"]
                continue
            pre = acc.pop(r["name"], {})
            out.append(dict(name=r["name"], lower=round(pre.get("lower", 0.0), 3), compile=r["s"],
                            cache_hit=r["cache_hit"]))
        return out
