"""python -m linscale_jax.study [--config=PRESET] --workdir=DIR
       [--dry_run] [--join_only] [--shard=i/n] [--approach=1|2|3] [--backend=local|ray]
       [--ray_address=ADDR]   (+ --config.<field>=... overrides)
   python -m linscale_jax.study verdicts --table=FILE|NAME=FILE [...] [--recall=FILE] [--margin=M]
       [--tolerance=T] [--seed_sd=S] [--bootstrap=B] [--seed=S] [--min_step=K] [--json]
   python -m linscale_jax.study side_by_side --workdir=A --workdir=B [...] [--out=FILE.md]
   python -m linscale_jax.study seed_sd_prior --workdir=A --workdir=B [...] [--out=FILE.json]

PRESET: a packaged preset's name (cpu, the default; quick, paper, tune, recall, recall_sweep, noise,
calibrate, ...: linscale_jax/configs/study/) or a preset file. Runs the preset's experiment (its `kind`, study.experiments: scaling, tune, recall, noise,
calibrate) in DIR: plans its runs, processes them (train or resume, evaluate), joins the results
and writes the report. Re-running resumes. --dry_run prints the runs and what they cost.
--shard=i/n processes runs with index % n == i only (one invocation per host or TPU slice); a later
invocation without --shard processes what is missing and joins; --join_only joins and reports what
exists without processing. --backend=ray runs every run as a Ray task (study.ray_backend: the
[cluster] extra): on a local Ray on 127.0.0.1, or on the cluster at --ray_address (or
$RAY_ADDRESS), whose nodes must all see DIR; lost workers, nodes and slices are retried
(study.cluster.max_retries). The default, local, processes in this process or in study.workers'
pinned processes (study.executor).
`verdicts` judges the paper's findings from checkpoint tables (scaling.verdicts); `side_by_side`
compares finished scaling studies (scaling.side_by_side); `seed_sd_prior` pools finished studies'
seed sds into the prior file a study of their design reads (study.noise.prior; scaling.seed_prior).
SIGTERM or Ctrl-C stops like train: every run under way saves its checkpoint (an evaluation stops
between rows), one line says so, exit status 0; re-running resumes. Further signals change nothing.
Errors are one line (ERROR: ...); tracebacks go to a log the line names.
"""

from __future__ import annotations

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.parallel.host_memory)
    from linscale_jax.parallel import cpu_codegen, host_memory, supervise

    cpu_codegen.use_xla_fusions()  # XLA:CPU's own fusions, not YNNPACK's (the workers inherit it)
    host_memory.use_huge_pages()
    supervise.maybe_supervise("study")  # several processes: one console, a line for a lost peer
    from linscale_jax.run import signals

    signals.install()  # any number of SIGTERM / Ctrl-C: one stop (linscale_jax.run.signals)

import sys

from absl import app, flags
from ml_collections import config_flags

from linscale_jax.parallel import distributed
from linscale_jax.run import command, command_line, config_file

_CONFIG = config_flags.DEFINE_config_file(
    "config", config_file.resolve("cpu", "study"),
    "Study preset: a packaged name (cpu, quick, tune, recall, noise, calibrate, ...) or a file; its kind "
    "says what runs.")
_WORKDIR = flags.DEFINE_multi_string("workdir", None, "Study directory (side_by_side, seed_sd_prior: repeat, "
                                     "2 or more).")
_DRY = flags.DEFINE_bool("dry_run", False, "Print the runs, their commands and compute; process nothing.")
_SHARD = flags.DEFINE_string("shard", None, "i/n: process only runs with index % n == i.")
_JOIN = flags.DEFINE_bool("join_only", False, "Process nothing: join and report what exists now.")
_APPROACH = flags.DEFINE_integer("approach", None, "A scaling study's fit approach: 1 (default), 2 or 3.")
_BACKEND = flags.DEFINE_enum("backend", "local", ["local", "ray"],
                             "Where runs are processed: local (this machine's pool) or ray (Ray tasks).")
_RAY_ADDRESS = flags.DEFINE_string("ray_address", None, "A Ray cluster to attach to ($RAY_ADDRESS); "
                                   "none: a local Ray on 127.0.0.1.")
_INITIALIZE = distributed.define_launch_flags()
# verdicts
_TABLE = flags.DEFINE_multi_string("table", None, "verdicts: a checkpoint table FILE or NAME=FILE "
                                   "(repeat: one per loss estimator).")
_RECALL = flags.DEFINE_string("recall", "", "verdicts: a recall study's recall.csv (finding 3).")
_MARGIN = flags.DEFINE_float("margin", 0.05, "verdicts: equivalence margin, nats.")
_TOLERANCE = flags.DEFINE_float("tolerance", 0.1, "verdicts: held-out tolerance, nats.")
_SEED_SD = flags.DEFINE_float("seed_sd", None, "verdicts: seed-to-seed sd (nats) assumed when no arch "
                              "has replicate runs in the table.")
_BOOTSTRAP = flags.DEFINE_integer("bootstrap", 200, "verdicts: paired draws per verdict.")
_SEED = flags.DEFINE_integer("seed", 0, "verdicts: seed of the draws.")
_MIN_STEP = flags.DEFINE_float("min_step", 0.0, "verdicts: ignore checkpoints before this step.")
_JSON = flags.DEFINE_bool("json", False, "verdicts: print JSON.")
# side_by_side
_OUT = flags.DEFINE_string("out", None, "side_by_side: also write the markdown here; seed_sd_prior: write "
                           "the prior's JSON here.")

COMMANDS = {  # subcommand -> its own flags (the experiment's: none of these)
    "verdicts": ("table", "recall", "margin", "tolerance", "seed_sd", "bootstrap", "seed", "min_step", "json"),
    "side_by_side": ("workdir", "out"),
    "seed_sd_prior": ("workdir", "out"),
}
RUN_FLAGS = ("config", "workdir", "dry_run", "shard", "join_only", "approach", "backend", "ray_address")


def _check_flags(name: str) -> None:
    """A flag of another command is a usage error naming the command it belongs to."""
    mine = COMMANDS.get(name, RUN_FLAGS)
    for cmd, own in {"": RUN_FLAGS, **COMMANDS}.items():
        for f in own:
            if f not in mine and flags.FLAGS[f].present:
                this = f"`python -m linscale_jax.study {name}`" if name else "an experiment run"
                _usage(f"--{f} is not a flag of {this}; it belongs to "
                       + (f"`python -m linscale_jax.study {cmd}`" if cmd else "an experiment run"))


def _usage(problem: str) -> None:
    """The commands' one-line usage error (exit status 2)."""
    from linscale_jax import console

    console.print_error(f"bad command line: {problem}")
    sys.exit(2)


def main(argv) -> None:
    from absl import logging

    if len(argv) > 2 or (len(argv) == 2 and argv[1] not in COMMANDS):
        _usage(f"unexpected arguments {argv[1:]}; a subcommand is one of {', '.join(COMMANDS)}")
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # Orbax logs every save/restore at INFO
    name = argv[1] if len(argv) == 2 else ""
    _check_flags(name)
    if name == "verdicts":
        if not _TABLE.value:
            _usage("verdicts needs --table=FILE (or NAME=FILE, one per loss estimator)")
        sys.exit(command.run(_verdicts, command="study"))
    if name == "side_by_side":
        if len(_WORKDIR.value or []) < 2:
            _usage("side_by_side needs two or more --workdir=DIR (finished studies)")
        sys.exit(command.run(_side_by_side, command="study"))
    if name == "seed_sd_prior":
        if len(_WORKDIR.value or []) < 2:
            _usage("seed_sd_prior needs two or more --workdir=DIR (finished studies of one design)")
        sys.exit(command.run(_seed_sd_prior, command="study"))
    if len(_WORKDIR.value or []) != 1:
        _usage("give one --workdir=DIR (the study directory)")
    sys.exit(command.run(_study, workdir=_WORKDIR.value[0], command="study"))


def _verdicts() -> None:
    from linscale_jax.study.scaling import verdicts

    print(verdicts.command(_TABLE.value, _RECALL.value, _MARGIN.value, _TOLERANCE.value, _SEED_SD.value,
                           _BOOTSTRAP.value, _SEED.value, _MIN_STEP.value, _JSON.value))


def _side_by_side() -> None:
    from linscale_jax.study.scaling import side_by_side

    text = side_by_side.render(_WORKDIR.value)
    print(text)
    if _OUT.value:
        with open(_OUT.value, "w") as f:
            f.write(text)


def _seed_sd_prior() -> None:
    from linscale_jax.study.scaling import seed_prior

    print(seed_prior.main(_WORKDIR.value, _OUT.value))


def _study() -> None:
    from linscale_jax.study import experiments
    from linscale_jax.study.lock import hold_study

    _INITIALIZE()
    options = experiments.Options(backend=_BACKEND.value, ray_address=_RAY_ADDRESS.value, shard=_SHARD.value,
                                  join_only=_JOIN.value, dry_run=_DRY.value, approach=_APPROACH.value)
    with hold_study(_WORKDIR.value[0], _SHARD.value, enabled=False if _DRY.value or _JOIN.value else None):
        experiments.run(_CONFIG.value, _WORKDIR.value[0], options)


if __name__ == "__main__":
    app.run(main, argv=config_file.command_argv(sys.argv, "study"),  # --config=NAME: a packaged preset
            flags_parser=command_line.parser(__doc__, _CONFIG, "study"))  # --help, --config_help, one-line errors
