"""Train a model: python -m linscale_jax.train --config=configs/<file>.py[:<arch>-<size>] --workdir=DIR

  --config.train.steps=50 ...   ml_collections overrides of any config field
  --config_help                 list the config file's fields with their values and notes, and exit
  --init_from=PATH              start a NEW run from the parameters of another run or a converted
                                checkpoint (a workdir -> its newest checkpoint, or
                                DIR/checkpoints/<step>) with a fresh optimizer and data from the
                                start. An error once DIR has checkpoints: re-run without it to resume.
  --resume_step=N               resume from checkpoint N; later checkpoints move to
                                DIR/checkpoints_discarded/ (0: start over). Used after a divergence.
  --allow_config_change         accept a config that differs from the run's beyond the fields that
                                may change on resume (linscale_jax.run.identity); recorded in metadata.
Re-running the same command resumes from DIR's newest verified checkpoint, with the same batches.
One trainer per DIR (DIR/train.lock); eval may run beside it. SIGTERM or Ctrl-C (any number of
them) saves a checkpoint and exits 0 with one line. A NaN/inf or exploding loss exits 1 naming the
last good checkpoint and the command that resumes from it. Errors are one line; tracebacks go to DIR/logs/.
Multi-host: run the same command on every host (TPU pod slices and SLURM are detected);
elsewhere add --coordinator_address=HOST:PORT --num_processes=N --process_id=I (or the variables
LINSCALE_COORDINATOR_ADDRESS, LINSCALE_NUM_PROCESSES, LINSCALE_PROCESS_ID). SIGTERM to any one
process makes all of them save the same step and exit 0. A process that dies or never registers
stops the others within --peer_timeout seconds (default 60), each with one line naming it, the
checkpoint a re-run resumes from and the command. Process 0 prints progress; the others print only
their own errors, as `ERROR: [process I] ...`. See docs/training.md, "Running on several hosts".
"""

from __future__ import annotations

import sys


from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from linscale_jax.parallel import distributed, supervise
from linscale_jax.run import command, command_line

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, optionally with an argument: configs/tiny.py:tnl-d64.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, metrics, tensorboard).")
_INIT_FROM = flags.DEFINE_string("init_from", None,
                                 "Workdir or checkpoint dir whose params start this (new) run.")
_RESUME_STEP = flags.DEFINE_integer("resume_step", None,
                                    "Resume from this checkpoint; later ones are moved aside.")
_ALLOW_CHANGE = flags.DEFINE_bool("allow_config_change", False,
                                  "Accept a config change on resume (recorded in metadata).")
_INITIALIZE = distributed.define_launch_flags()
flags.mark_flags_as_required(["config", "workdir"])


def _train() -> int:
    from linscale_jax.train import divergence, loop, rule

    _INITIALIZE()
    config = rule.resolve(_CONFIG.value)  # optim.rule: lr, batch, b2, warmup
    try:
        summary = loop.train(config, _WORKDIR.value, init_from=_INIT_FROM.value,
                                resume_step=_RESUME_STEP.value,
                                allow_config_change=_ALLOW_CHANGE.value)
    except divergence.DivergenceError as e:
        argv = sys.argv + rule.pinned_flags(config)  # a lower lr must not be replaced by the rule's
        e.args = (f"{e} Command: {divergence.resume_command(argv, e.last_good, e.lr)}",)
        raise
    if distributed.is_primary() and not summary["stopped"]:  # a stop printed its own line
        print(f"Done at step {summary['step']}; outputs in {_WORKDIR.value}.", flush=True)
    return 0


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:  # keep Orbax's per-save INFO lines out of the way
        logging.set_verbosity(logging.WARNING)
    sys.exit(command.run(_train, workdir=_WORKDIR.value, command="train", native_to_log=True))


def run() -> None:
    """The command's entry point (linscale_jax/train/__main__.py)."""
    supervise.maybe_supervise("train")  # several processes: one console, a line for a lost peer
    app.run(main, flags_parser=command_line.parser(__doc__, _CONFIG))
