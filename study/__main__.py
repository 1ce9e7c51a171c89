"""python -m study --config=configs/study/<preset>.py --workdir=DIR
       [--dry_run] [--join_only] [--shard=i/n] [--approach=1|2|3]   (+ --config.<field>=... overrides)

Trains every run of the preset (archs × sizes on one token budget), evaluates every checkpoint,
fits the laws and writes DIR/report.md. Re-running resumes. --dry_run prints each run's command,
steps and compute in PF-days, and the totals. --shard=i/n processes runs with index % n == i only
(one invocation per host or TPU slice); a later invocation without --shard trains what is
missing and joins the results; --join_only joins, fits and reports what exists without training.
A preset with kind = "recall" (configs/study/recall.py) runs the MQAR recall experiment instead
(study.recall: DIR/recall.csv, recall.png, a section of DIR/report.md).
SIGTERM or Ctrl-C stops like train: every run under way saves its checkpoint (an evaluation stops
between rows), one line says so, exit status 0; re-running resumes. A second Ctrl-C stops at once.
Errors are one line (ERROR: ...); tracebacks go to a log the line names.
"""

from __future__ import annotations

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.dist.host_memory)
    from linscale_jax.dist import host_memory, supervise

    host_memory.use_huge_pages()
    supervise.maybe_supervise("study")  # several processes: one console, a line for a lost peer

import signal
import sys

from absl import app, flags
from ml_collections import config_flags

from linscale_jax import cli_errors
from linscale_jax.dist import distributed

_CONFIG = config_flags.DEFINE_config_file("config", "configs/study/cpu.py", "Study preset.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Study directory (runs/, table.csv, fit/, report.md).")
_DRY = flags.DEFINE_bool("dry_run", False, "Print the runs, their commands and compute; train nothing.")
_SHARD = flags.DEFINE_string("shard", None, "i/n: process only runs with index % n == i.")
_JOIN = flags.DEFINE_bool("join_only", False, "Train nothing: join, fit and report what exists now.")
_APPROACH = flags.DEFINE_integer("approach", None, "Fit approach 1 (default), 2 or 3.")
_INITIALIZE = distributed.define_launch_flags()
flags.mark_flags_as_required(["workdir"])


def _stop(signum, _frame):
    """Outside a trainer (which saves first) a signal stops the study between evaluation rows."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    from absl import logging

    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # Orbax logs every save/restore at INFO
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    sys.exit(cli_errors.run(_study, command="study"))


def _study() -> None:
    from study import plan, runner

    _INITIALIZE()
    if _CONFIG.value.get("kind") == "recall":  # configs/study/recall.py: MQAR, not a scaling study
        from study import recall

        recall.run_recall(_CONFIG.value, _WORKDIR.value)
        return
    if _CONFIG.value.get("kind") == "tune":  # configs/study/tune.py: the tuning grid (study.tune)
        from study import tune

        tune.run_tune(_CONFIG.value, _WORKDIR.value, dry_run=_DRY.value)
        return
    if _DRY.value:
        print(plan.dry_run_text(plan.build_plan(_CONFIG.value, _WORKDIR.value), _SHARD.value))
        return
    if _APPROACH.value not in (None, 1, 2, 3):
        raise ValueError(f"--approach must be 1, 2 or 3, got {_APPROACH.value}; pass one of those.")
    runner.run_study(_CONFIG.value, _WORKDIR.value, _SHARD.value, _APPROACH.value,
                     join_only=_JOIN.value)


if __name__ == "__main__":
    app.run(main)
