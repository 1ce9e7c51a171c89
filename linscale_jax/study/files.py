"""The file names of a study's folder, written once (the contract's FITS_JSON aside, which fit writes).

    files.study_path(DIR, files.STUDY_FIT, files.FIT_ERRORS)    # DIR/fit/errors.json
    files.study_run_dir(DIR, "tnl-d32")                           # DIR/runs/tnl-d32
"""

from __future__ import annotations

import os

# ---- a run of a study: DIR/runs/<run>/<name> (beside the trainer's own files: linscale_jax.contract)
STUDY_RUNS = "runs"  # one trainer workdir per run: runs/<name>/
STUDY_LOG = "study.log"  # a run's output when a worker process or a Ray task processes it
RUN_STATUS = "status.json"  # a run's state under the Ray backend: attempt, node, state, times
TIMING = "timing.jsonl"  # a scaling run's wall time per invocation: train/eval seconds, compile share
COOLDOWNS = "cooldowns"  # a run's cooldown branches: cooldowns/<step>/ (a trainer workdir each)
DIVERGED = "diverged.txt"  # a tuning cell the trainer stopped as diverged (an infinite loss)
RECALL_RESULT = "result.json"  # a recall run's scores per number of pairs, with its settings
NOISE_LOSSES = "noise_losses.npz"  # a noise run's per-batch losses of every checkpoint and branch

# ---- a scaling study: DIR/<name> -------------------------------------------------------------------
STUDY_PLAN = "plan.txt"  # the dry-run listing of every run
STUDY_TABLE = "table.csv"  # every checkpoint of every run (eval.export)
STUDY_FIT = "fit"  # the laws: fit/table*.csv (one per estimator), fits.json, PNGs
BACKTEST_CSV = "backtest.csv"  # in fit/: each rung predicted from the smaller ones (scaling.laws)
BACKTEST_TOKENS_CSV = "backtest_tokens.csv"  # in fit/: each run's end predicted from its first part (scaling.laws)
FIT_ERRORS = "errors.json"  # in STUDY_FIT
BRACKETING_CSV = "bracketing.csv"  # in STUDY_FIT: per arch and estimator, where the envelope is interior
ENVELOPE_CSV = "envelope.csv"  # in STUDY_FIT: every arch's envelope per estimator
HOLDOUT_CSV = "holdout.csv"
HOLDOUT_CURVES_CSV = "holdout_curves.csv"
HOLDOUT_JSON = "holdout.json"
FINDINGS_JSON = "findings.json"  # scaling.results: every result of the study, the report's data
REPORT_MD = "report.md"  # every kind's report (recall adds its section to it)
REPORT_DIR = "report"  # the report's PNGs

# ---- the other kinds' folders ---------------------------------------------------------------------
CALIBRATION_JSON = "calibration.json"  # calibrate: the verdicts on simulations of the design
CALIBRATION_DIR = "calibration"  # calibrate: calibration/<design>/<case>/counts.json
CALIBRATION_COUNTS = "counts.json"  # a case's verdicts counted per scenario, with its settings
RECALL_CSV = "recall.csv"  # recall: the accuracies per cell (recall.table.COLUMNS)
RECALL_RUNS_CSV = "recall_runs.csv"  # recall: every run at every rate
RECALL_RATES_JSON = "recall_rates.json"  # recall: the sweep's chosen rates (recall.rates)
RECALL_PNG = "recall.png"
NOISE_JSON = "noise.json"  # noise: the statistics
NOISE_MD = "noise.md"
TUNE_DIR = "tune"  # tune: tune/cells.csv, cells.md, rule.json, lr.png
PREDICT_LADDER = "ladder"  # predict: the ladder completed with the replicate runs it lacked (a scaling study)


def study_path(workdir, *names: str) -> str:
    """DIR/<names...>, e.g. study_path(d, STUDY_FIT, FIT_ERRORS)."""
    return os.path.join(str(workdir), *names)


def fit_table_name(estimator: str, primary: bool) -> str:
    """The fit table of one loss estimator inside STUDY_FIT: table.csv for the primary one (the laws,
    plots and held-out check use it), table_<estimator>.csv for every other."""
    return "table.csv" if primary else f"table_{estimator}.csv"


def study_run_dir(workdir, run_name: str) -> str:
    return os.path.join(str(workdir), STUDY_RUNS, run_name)
