"""python -m linscale_jax.study --config=configs/study/<preset>.py --workdir=DIR
       [--dry_run] [--join_only] [--shard=i/n] [--approach=1|2|3] [--backend=local|ray]
       [--ray_address=ADDR]   (+ --config.<field>=... overrides)

Trains every run of the preset (archs × sizes on one token budget), evaluates every checkpoint,
fits the laws and writes DIR/report.md. Re-running resumes. --dry_run prints each run's command,
steps and compute in PF-days, and the totals. --shard=i/n processes runs with index % n == i only
(one invocation per host or TPU slice); a later invocation without --shard trains what is
missing and joins the results; --join_only joins, fits and reports what exists without training.
--backend=ray runs every run as a Ray task (study.ray_backend: the [cluster] extra): on a local Ray
on 127.0.0.1, or on the cluster at --ray_address (or $RAY_ADDRESS), whose nodes must all see DIR;
lost workers, nodes and slices are retried (study.cluster.max_retries). The default, local, trains
in this process or in study.workers' pinned processes.
A preset with kind = "recall" (configs/study/recall.py) runs the MQAR recall experiment instead
(study.recall: DIR/recall.csv, recall.png, a section of DIR/report.md).
SIGTERM or Ctrl-C stops like train: every run under way saves its checkpoint (an evaluation stops
between rows), one line says so, exit status 0; re-running resumes. Further signals change nothing.
Errors are one line (ERROR: ...); tracebacks go to a log the line names.
"""

from __future__ import annotations

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.parallel.host_memory)
    from linscale_jax.parallel import host_memory, supervise

    host_memory.use_huge_pages()
    supervise.maybe_supervise("study")  # several processes: one console, a line for a lost peer
    from linscale_jax.run import signals

    signals.install()  # any number of SIGTERM / Ctrl-C: one stop (linscale_jax.run.signals)

import sys

from absl import app, flags
from ml_collections import config_flags

from linscale_jax.parallel import distributed
from linscale_jax.run import command

_CONFIG = config_flags.DEFINE_config_file("config", "configs/study/cpu.py", "Study preset.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Study directory (runs/, table.csv, fit/, report.md).")
_DRY = flags.DEFINE_bool("dry_run", False, "Print the runs, their commands and compute; train nothing.")
_SHARD = flags.DEFINE_string("shard", None, "i/n: process only runs with index % n == i.")
_JOIN = flags.DEFINE_bool("join_only", False, "Train nothing: join, fit and report what exists now.")
_APPROACH = flags.DEFINE_integer("approach", None, "Fit approach 1 (default), 2 or 3.")
_BACKEND = flags.DEFINE_enum("backend", "local", ["local", "ray"],
                             "Where runs train: local (this machine's pool) or ray (Ray tasks).")
_RAY_ADDRESS = flags.DEFINE_string("ray_address", None, "A Ray cluster to attach to ($RAY_ADDRESS); "
                                   "none: a local Ray on 127.0.0.1.")
_INITIALIZE = distributed.define_launch_flags()
flags.mark_flags_as_required(["workdir"])


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    from absl import logging

    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # Orbax logs every save/restore at INFO
    sys.exit(command.run(_study, workdir=_WORKDIR.value, command="study"))


def _study() -> None:
    from linscale_jax.study.lock import hold_study

    _INITIALIZE()
    with hold_study(_WORKDIR.value, _SHARD.value, enabled=False if _DRY.value or _JOIN.value else None):
        _study_kind()


def _study_kind() -> None:
    from linscale_jax.study import plan, runner

    if _CONFIG.value.get("kind") == "recall":  # configs/study/recall.py: MQAR, not a scaling study
        from linscale_jax.study import recall

        recall.run_recall(_CONFIG.value, _WORKDIR.value)
        return
    if _CONFIG.value.get("kind") == "tune":  # configs/study/tune.py: the tuning grid (study.tune)
        from linscale_jax.study import tune

        tune.run_tune(_CONFIG.value, _WORKDIR.value, dry_run=_DRY.value)
        return
    if _DRY.value:
        print(plan.dry_run_text(plan.build_plan(_CONFIG.value, _WORKDIR.value), _SHARD.value))
        return
    if _APPROACH.value not in (None, 1, 2, 3):
        raise ValueError(f"--approach must be 1, 2 or 3, got {_APPROACH.value}; pass one of those.")
    runner.run_study(_CONFIG.value, _WORKDIR.value, _SHARD.value, _APPROACH.value,
                     join_only=_JOIN.value, backend=_BACKEND.value, ray_address=_RAY_ADDRESS.value)


if __name__ == "__main__":
    app.run(main)
