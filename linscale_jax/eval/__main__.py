"""python -m linscale_jax.eval --workdir=DIR [--steps=all|last|S1,S2,...] [--tasks=val_loss,niah,...] [--out=OUT]

Evaluates the run's checkpoints (all by default) and appends one row per (checkpoint, task) to
DIR/eval/results.jsonl (OUT/results.jsonl with --out, e.g. for checkpoints on a read-only mount),
skipping pairs already there. Tasks: see linscale_jax/eval/suite.py. SIGTERM or Ctrl-C (any number of them)
stops with one line, exit status 0; the rows written are kept and re-running evaluates the rest.
Checkpoints written by any mesh or number of processes load onto one device. Several processes
(--coordinator_address/--num_processes/--process_id, as for training) split the validation batches.
"""

import sys

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.parallel.host_memory)
    from linscale_jax.parallel import cpu_codegen, host_memory
    from linscale_jax.run import signals

    cpu_codegen.use_xla_fusions()  # XLA:CPU's own fusions, as the trainer's
    host_memory.use_huge_pages()
    signals.install()  # any number of SIGTERM / Ctrl-C: one stop line, exit 0

from linscale_jax.eval.suite import TASKS


def main(argv=None) -> int:
    """The command: one line on an error (rc 1, traceback to a log), rc 2 on a bad command line."""
    from linscale_jax.run import command

    return command.run(lambda: _main(argv), command="eval")


def _main(argv) -> int:
    from linscale_jax.errors import ArgumentParser

    p = ArgumentParser(prog="python -m linscale_jax.eval", description=__doc__.split("\n\n")[1])
    p.add_argument("--workdir", required=True, help="training run directory (holds checkpoints/)")
    p.add_argument("--out", default=None, help="results directory (default DIR/eval; the "
                   "checkpoints are only read, so DIR may be read-only)")
    p.add_argument("--steps", default="all", help="all | last | comma list of steps")
    p.add_argument("--tasks", default="val_loss", help=f"comma list of: {', '.join(TASKS)}")
    p.add_argument("--val_batches", type=int, default=None, help="validation batches (default: config)")
    p.add_argument("--niah_grid", default="35x35", help="LENGTHSxDEPTHS of the NIAH grid")
    p.add_argument("--probe_items", type=int, default=64)
    p.add_argument("--wikitext", default=None, help="local WikiText-2 style .txt/.jsonl")
    p.add_argument("--lambada", default=None, help="local LAMBADA style .jsonl")
    p.add_argument("--limit", type=int, default=None, help="lm-eval --limit for commonsense/scrolls")
    p.add_argument("--coordinator_address", default=None, help="multi-process: HOST:PORT of process 0")
    p.add_argument("--num_processes", type=int, default=None, help="multi-process: number of processes")
    p.add_argument("--process_id", type=int, default=None, help="multi-process: this process's id")
    a = p.parse_args(argv)
    from linscale_jax.eval.runner import evaluate, results_path
    from linscale_jax.parallel import distributed
    from linscale_jax.errors import Stopped
    from linscale_jax.run import signals

    try:
        grid = tuple(int(x) for x in a.niah_grid.lower().split("x"))
        if len(grid) != 2 or min(grid) < 1:
            raise ValueError
    except ValueError:
        p.error(f"--niah_grid must look like 35x35, got {a.niah_grid!r}")
    distributed.initialize(a.coordinator_address, a.num_processes, a.process_id)
    try:
        evaluate(a.workdir, a.steps, a.tasks, out=a.out, ctx_kwargs=dict(
            val_batches=a.val_batches, niah_grid=grid, probe_items=a.probe_items,
            wikitext=a.wikitext, lambada=a.lambada, limit=a.limit))
    except signals.Interrupted as e:
        raise Stopped(f"{e}: eval stopped; the rows written so far are kept in "
                      f"{results_path(a.workdir, a.out)}; re-run the same command to evaluate the "
                      "rest.") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
