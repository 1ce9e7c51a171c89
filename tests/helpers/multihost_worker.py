"""`python -m linscale_jax.train` with a test hook, for the multi-process tests in tests/train/.

    python tests/helpers/multihost_worker.py HOOK [train flags...]

HOOK is "none", "sleep_after=S" (every process logs step S, drops DIR/.at-S-<process>, then sleeps
until killed: the test kill -9s them), "wait_after=S" (as sleep_after, but the processes keep
taking part in collectives while they wait: a peer's death is seen as it is on a pod), or
"sigterm_at=S:P" (process P sends itself SIGTERM after
logging step S: a preemption notice reaching one host only; it then waits until every process has
reported its step to JAX's preemption sync protocol, so the save step is chosen while the run is
still going, as it is when a preemption notice comes minutes ahead).
"""

import os
import signal
import sys
import time

from absl import app


def install(hook: str, workdir: str) -> None:
    import jax

    from linscale_jax.train import metrics

    if hook == "none":
        return
    kind, _, arg = hook.partition("=")
    write = metrics.MetricsLogger.write

    def hooked(self, row):
        write(self, row)
        if kind == "wait_after" and row["step"] == int(arg):
            from linscale_jax.parallel import distributed

            open(os.path.join(workdir, f".at-{arg}-{jax.process_index()}"), "w").close()
            while True:
                distributed.any_process(False)
                time.sleep(0.5)
        if kind == "sleep_after" and row["step"] == int(arg):
            open(os.path.join(workdir, f".at-{arg}-{jax.process_index()}"), "w").close()
            while True:
                time.sleep(60)
        if kind == "sigterm_at":
            step, proc = (int(x) for x in arg.split(":"))
            if row["step"] == step and jax.process_index() == proc:
                os.kill(os.getpid(), signal.SIGTERM)
                wait_for_preemption_sync()

    metrics.MetricsLogger.write = hooked


def wait_for_preemption_sync(timeout=120):
    """Until every process's step counter is in the coordinator's key-value store (the sync
    protocol's step 2; the sync step follows at once)."""
    import jax
    from jax._src import distributed

    client, deadline = distributed.global_state.client, time.time() + timeout
    while client is not None and time.time() < deadline:
        if len(client.key_value_dir_get("PREEMPTION_CURRENT_COUNTER/")) >= jax.process_count():
            time.sleep(1.0)
            return
        time.sleep(0.1)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    hook, argv = sys.argv[1], [sys.argv[0]] + sys.argv[2:]
    from linscale_jax.parallel import supervise

    supervise.maybe_supervise("train", argv)  # as `python -m linscale_jax.train` does
    from linscale_jax.train import cli as train

    workdir = next(a.split("=", 1)[1] for a in argv if a.startswith("--workdir="))
    install(hook, workdir)
    app.run(train.main, argv=argv)
