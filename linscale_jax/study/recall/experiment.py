"""Miniature retrieval: train every architecture on MQAR (linscale_jax.data.mqar) and measure recall
against the size of its decoding state.

    python -m linscale_jax.study --config=recall --workdir=DIR         # the preset
    python -m linscale_jax.study --config=recall_sweep --workdir=DIR   # its learning rates
    runs = plan(study, workdir); joined = join(study, runs, workdir, ctx); report(...)  # study.experiments
    v = recall.verdict_input(DIR + "/recall.csv")   # recall results where the positive control passed

Runs (study.recall.train): arch label × shape × seed × lr, each trained through the trainer's
optimizer and step on MQAR sequences whose number of key-value pairs is drawn from study.n_pairs
(Zoology's mixture training) for at most study.max_steps steps (study.sweep_steps when set),
stopping once the validation accuracy reaches study.stop_accuracy; then scored on study.eval_sequences test sequences per number
of pairs (accuracy = share of queries whose argmax is the stored value, 95 % Wilson interval).
Labels may be variants, e.g. tnl+short_conv=4 (the short convolution, linscale_jax.models.linear_common),
gdn+expand_v=1 or tnl+hybrid=3:1 (a hybrid stack: study.n_layers must hold its layer period).
Per (arch, shape) the rate with the best mean validation accuracy after the label's max_steps
(train.max_steps_of; read from the validation history of a run that trained longer) is kept; a run
with several rates per arch (the sweep) also writes DIR/recall_rates.json (study.recall.rates).

Writes DIR/recall.csv (study.recall.table.COLUMNS: one row per cell and seed plus the cell's seed
"all" row, each with a status: did_not_train, copy_level or recall), DIR/recall_runs.csv (every
run, every lr), DIR/recall.png and the "Recall (MQAR)" section of DIR/report.md (study.recall.report).
Resumable: each run keeps DIR/runs/<run>/result.json and is not retrained while its settings hold
(`finished`).
"""

from __future__ import annotations

import os

from linscale_jax.study import files
from linscale_jax.study.recall.rates import is_sweep, read as read_rates, record as rates_record, write as write_rates
from linscale_jax.study.recall.report import plot, report_section, update_report
from linscale_jax.study.recall.table import best_lr, cell_rows, write_csv, write_runs_csv
from linscale_jax.study.recall.train import build_runs, load_result, max_steps_of


def plan(study, workdir: str) -> list:
    """Every run of the preset (arch label × shape × lr × seed)."""
    return build_runs(study, workdir)


def finished(study, run) -> bool:
    """A run whose result is stored with the study's settings is not trained again."""
    return load_result(study, run) is not None


def join(study, runs, workdir: str, ctx) -> dict:
    """DIR/recall.csv (each cell at its chosen rate), DIR/recall_runs.csv (every run) and, for a
    sweep, DIR/recall_rates.json, from the runs whose results are stored."""
    results = {r.name: load_result(study, r) for r in runs}
    have = [r for r in runs if results[r.name] is not None]
    if not have:
        raise FileNotFoundError(f"no finished recall runs under {workdir}/runs; train some first")
    write_runs_csv(have, results, os.path.join(workdir, files.RECALL_RUNS_CSV))
    at = lambda label: max_steps_of(study, label)  # noqa: E731  (the preset's steps for the label)
    chosen = best_lr(have, results, float(study.stop_accuracy), at)
    rows = cell_rows(have, results, study, chosen)
    write_csv(rows, os.path.join(workdir, files.RECALL_CSV))
    written = [files.RECALL_CSV, files.RECALL_RUNS_CSV]
    if is_sweep(have):
        rates = rates_record(have, results, chosen, study, at)
        write_rates(os.path.join(workdir, files.RECALL_RATES_JSON), rates)
        written.append(files.RECALL_RATES_JSON)
    else:
        rates = read_rates(str(study.rates)) if not str(study.lr).strip() else None
    return {"rows": rows, "rates": rates, "written": written}


def report(study, workdir: str, joined: dict, ctx) -> str:
    """DIR/recall.png and the "Recall (MQAR)" section of DIR/report.md."""
    plot(joined["rows"], study, os.path.join(workdir, files.RECALL_PNG))
    path = os.path.join(workdir, files.REPORT_MD)
    update_report(path, report_section(joined["rows"], study, joined["rates"], os.path.join(workdir, files.RECALL_CSV)))
    ctx.log(f"[recall] wrote {workdir}/{', '.join(joined['written'] + [files.RECALL_PNG, files.REPORT_MD])}")
    return path
