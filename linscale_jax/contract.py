"""The contracts between the trainer, eval, fit and the study, written once (standard library only).

Everything that more than one package must agree on lives here, so that `fit` (which reads a table
and imports nothing else of the project) and the JAX side can never drift apart:

- units: PF_DAY, the paper's compute unit, and FLOPS_PER_PARAM_TOKEN, the k of C = k·N·D;
  BASELINE_ARCH, the softmax model the linear ones are judged against;
- the workdir layout: where a run keeps its checkpoints, metrics, eval results, logs and lock;
- a study's folder: where `python -m linscale_jax.study` keeps its runs, tables, fits and findings;
- the checkpoint table: its columns (TABLE_COLUMNS, what fit needs; TABLE_LEAD, the order
  eval.export writes) with one CSV writer and one CSV reader.

Importing this module imports no third-party library.
"""

from __future__ import annotations

import csv
import io
import os

PF_DAY = 8.64e19  # FLOPs in one PFLOP/s-day, the paper's compute unit.
FLOPS_PER_PARAM_TOKEN = 6.0  # k in C = k·N·D (forward + backward), the compute-optimal allocation's
BASELINE_ARCH = "llama"  # the softmax-attention baseline every linear architecture is compared with

# ---- workdir layout: DIR/<name> -------------------------------------------------------------
CHECKPOINTS = "checkpoints"  # DIR/checkpoints/<step>/ (Orbax: params, opt_state, data, metadata)
CHECKPOINTS_CORRUPT = "checkpoints_corrupt"  # steps that failed verification, moved aside
CHECKPOINTS_DISCARDED = "checkpoints_discarded"  # steps after --resume_step, moved aside
METRICS = "metrics.jsonl"  # one JSON row per logged training step
EVAL_RESULTS = os.path.join("eval", "results.jsonl")  # one JSON row per (step, task)
LOGS = "logs"  # tracebacks of failed commands
LOCK = "train.lock"  # the one trainer's lock
RUN_JSON = "run.json"  # optional run metadata for tables built from metrics only
TIMING = "timing.jsonl"  # a study run's wall time per invocation: train/eval seconds, compile share
STUDY_LOG = "study.log"  # a study run's output when the study trains runs in worker processes
RUN_STATUS = "status.json"  # a study run's state under a Ray backend: attempt, node, state, times
# Each checkpoint's metadata (step, tokens, flops, flops_exact, n_params, arch, run, config, ...)
# is plain JSON at DIR/checkpoints/<step>/metadata/metadata.
CHECKPOINT_METADATA = os.path.join("metadata", "metadata")


def split_list(value, field: str | None = None) -> list[str]:
    """'a, b,c' (or a list of such items) -> ['a', 'b', 'c']: the comma lists of presets and flags.
    With `field` (the name the user wrote) the list must not be empty: a ValueError naming it."""
    items = [x.strip() for x in (value.split(",") if isinstance(value, str) else value or ()) if str(x).strip()]
    if field is not None and not items:
        raise ValueError(f"{field}={value!r} is an empty list; give comma-separated names")
    return items


def workdir_file(workdir, name: str) -> str:
    """DIR/<name> as a string ('gs://…' kept as it is)."""
    return str(workdir).rstrip("/") + "/" + name


COOLDOWNS = "cooldowns"  # a run's cooldown branches: DIR/cooldowns/<step>/ (a trainer workdir each)


# ---- a study's folder: STUDY_DIR/<name> ------------------------------------------------------
STUDY_RUNS = "runs"  # one trainer workdir per run: runs/<arch>-<size>[-seed<k>]/
STUDY_PLAN = "plan.txt"  # the dry-run listing of every run
STUDY_TABLE = "table.csv"  # every checkpoint of every run (eval.export)
STUDY_FIT = "fit"  # the laws: fit/table*.csv (one per estimator), fits.json, PNGs
FITS_JSON = "fits.json"  # in STUDY_FIT
FIT_ERRORS = "errors.json"  # in STUDY_FIT
HOLDOUT_CSV = "holdout.csv"
HOLDOUT_CURVES_CSV = "holdout_curves.csv"
HOLDOUT_JSON = "holdout.json"
FINDINGS_JSON = "findings.json"  # study.results: every result of the study, the report's data
CALIBRATION_JSON = "calibration.json"  # study.calibrate: the verdicts on simulations of the design
BRACKETING_CSV = "bracketing.csv"  # in STUDY_FIT: per arch and estimator, where the envelope is interior
ENVELOPE_CSV = "envelope.csv"  # in STUDY_FIT: every arch's envelope per estimator
REPORT_MD = "report.md"
REPORT_DIR = "report"  # the report's PNGs
RECALL_CSV = "recall.csv"  # a recall study's accuracies (study.recall)
RECALL_PNG = "recall.png"
NOISE_JSON = "noise.json"  # study.noise's measurement
NOISE_MD = "noise.md"


def study_path(workdir, *names: str) -> str:
    """STUDY_DIR/<names...>, e.g. study_path(d, STUDY_FIT, FITS_JSON)."""
    return os.path.join(str(workdir), *names)


def fit_table_name(estimator: str, primary: bool) -> str:
    """The fit table of one loss estimator inside STUDY_FIT: table.csv for the primary one (the laws,
    plots and held-out check use it), table_<estimator>.csv for every other."""
    return "table.csv" if primary else f"table_{estimator}.csv"


def study_run_dir(workdir, run_name: str) -> str:
    return os.path.join(str(workdir), STUDY_RUNS, run_name)


# ---- the checkpoint table ------------------------------------------------------------------
# One row per (run, checkpoint): n_params = non-embedding parameters, tokens = training tokens so
# far, flops = the paper's compute C = (C/token) * tokens, loss = validation loss.
# An optional `seed` column names replicate runs of one (arch, n_params); study.verdicts treats runs
# of the same arch and size as seed replicates either way.
TABLE_COLUMNS = ("arch", "run", "step", "n_params", "tokens", "flops", "loss")
TABLE_LEAD = TABLE_COLUMNS + ("flops_exact",)  # the order the writer puts first
TABLE_LOSS = "loss"  # the column eval measures (its val_loss task)
# the others come from each checkpoint's metadata (eval copies them into every results row)
METADATA_COLUMNS = tuple(c for c in TABLE_LEAD if c != TABLE_LOSS)


def write_table_csv(rows: list[dict], path) -> None:
    """Write rows (dicts) as CSV: TABLE_LEAD first, then every other key sorted; missing = empty."""
    extra = sorted({k for r in rows for k in r} - set(TABLE_LEAD))
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(TABLE_LEAD) + extra, restval="")
        w.writeheader()
        w.writerows(rows)


def read_table_csv(text: str) -> tuple[list[str], list[dict]]:
    """Parse a table CSV's text -> (header names, rows as dicts of strings)."""
    reader = csv.DictReader(io.StringIO(text))
    names = list(reader.fieldnames or [])
    return names, list(reader)
