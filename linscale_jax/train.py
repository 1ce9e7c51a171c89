"""Train a model: python -m linscale_jax.train --config=configs/<file>.py[:<arch>-<size>] --workdir=DIR

  --config.train.steps=50 ...   ml_collections overrides of any config field
  --init_from=PATH              start from the parameters of another run or a converted checkpoint
                                (a workdir -> its newest checkpoint, or DIR/checkpoints/<step>) with a
                                fresh optimizer and data from the start ("train --resume" for
                                converted weights). Ignored once DIR has checkpoints of its own.
Re-running the same command resumes from DIR's newest complete checkpoint, with the same batches.
SIGTERM saves a checkpoint and exits 0. A NaN/inf loss exits 1 with the step, keeping the last good
checkpoint. Multi-host: run the same command on every host (TPU pod slices and SLURM are detected);
elsewhere add --coordinator_address=HOST:PORT --num_processes=N --process_id=I (or the variables
LINSCALE_COORDINATOR_ADDRESS, LINSCALE_NUM_PROCESSES, LINSCALE_PROCESS_ID). SIGTERM to any one
process makes all of them save the same step and exit 0. See README "Running on several hosts".
"""

from __future__ import annotations

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from linscale_jax import distributed

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, optionally with an argument: configs/tiny.py:tnl-d64.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, metrics, tensorboard).")
_INIT_FROM = flags.DEFINE_string("init_from", None,
                                 "Workdir or checkpoint dir whose params start this run.")
_INITIALIZE = distributed.define_launch_flags()
flags.mark_flags_as_required(["config", "workdir"])


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:  # keep Orbax's per-save INFO lines out of the way
        logging.set_verbosity(logging.WARNING)
    from linscale_jax import trainer

    try:
        _INITIALIZE()
        summary = trainer.train(_CONFIG.value, _WORKDIR.value, init_from=_INIT_FROM.value)
    except (trainer.NonFiniteLossError, ValueError, FileNotFoundError) as e:
        print(f"ERROR: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    if not distributed.is_primary():
        return
    print(f"Done at step {summary['step']}"
          f"{' (stopped by ' + summary['stopped'] + ')' if summary['stopped'] else ''}; "
          f"outputs in {_WORKDIR.value}.", flush=True)


if __name__ == "__main__":
    app.run(main)
