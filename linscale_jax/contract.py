"""The contracts between the trainer, eval, fit and the study, written once (standard library only).

Everything that more than one package must agree on lives here, so that `fit` (which reads a table
and imports nothing else of the project) and the JAX side can never drift apart:

- units: PF_DAY, the paper's compute unit, and FLOPS_PER_PARAM_TOKEN, the k of C = k·N·D;
  BASELINE_ARCH, the softmax model the linear ones are judged against;
- the workdir layout: where a run keeps its checkpoints, metrics, eval results, logs and lock;
- the comma lists of presets and flags (split_list);
- the laws' file (FITS_JSON), which fit writes and the study reads (the study's own file names:
  linscale_jax.study.files);
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


# ---- the laws' files (fit writes them; the study reads them: linscale_jax.study.files has its own) ----
FITS_JSON = "fits.json"  # the fitted laws (fit.FitResult.write), in a study's fit/ folder


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
