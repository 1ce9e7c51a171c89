"""Miniature retrieval: train every architecture on MQAR (linscale_jax.data.mqar) and measure recall
against the size of its decoding state.

    python -m linscale_jax.study --config=configs/study/recall.py --workdir=DIR         # the preset
    python -m linscale_jax.study --config=configs/study/recall_sweep.py --workdir=DIR   # its learning rates
    rows = run_recall(study, workdir)
    v = verdict_input(DIR + "/recall.csv")   # recall results where the positive control passed

Runs (study.recall.train): arch label × shape × seed × lr, each trained through the trainer's
optimizer and step on MQAR sequences whose number of key-value pairs is drawn from study.n_pairs
(Zoology's mixture training) for at most study.max_steps steps (study.sweep_steps when set),
stopping once the validation accuracy reaches study.stop_accuracy; then scored on study.eval_sequences test sequences per number
of pairs (accuracy = share of queries whose argmax is the stored value, 95 % Wilson interval).
Labels may be variants, e.g. tnl+short_conv=4 (the short convolution, linscale_jax.models.linear_common).
Per (arch, shape) the rate with the best mean validation accuracy after the label's max_steps
(train.max_steps_of; read from the validation history of a run that trained longer) is kept; a run
with several rates per arch (the sweep) also writes DIR/recall_rates.json (study.recall.rates).

Writes DIR/recall.csv (study.recall.table.COLUMNS: one row per cell and seed plus the cell's seed
"all" row, each with a status: did_not_train, copy_level or recall), DIR/recall_runs.csv (every
run, every lr), DIR/recall.png and the "Recall (MQAR)" section of DIR/report.md (study.recall.report).
Resumable: each run keeps DIR/runs/<run>/result.json and is not retrained while its settings hold.
"""

from __future__ import annotations

import os
import time

from linscale_jax.study.recall.rates import is_sweep, read as read_rates, record as rates_record, write as write_rates
from linscale_jax.study.recall.report import SECTION, control_sentence, plot, report_section, update_report
from linscale_jax.study.recall.table import (COLUMNS, COPY_LEVEL, DID_NOT_TRAIN, RECALL, STATUSES, best_lr, cell_rows,
                                control, read_csv, verdict_input, wilson, write_csv, write_runs_csv)
from linscale_jax.study.recall.train import build_runs, load_result, max_steps_of, process_run

__all__ = ["COLUMNS", "COPY_LEVEL", "DID_NOT_TRAIN", "RECALL", "SECTION", "STATUSES", "control",
           "control_sentence", "read_csv", "run_recall", "update_report", "verdict_input", "wilson"]


def _print(msg: str) -> None:
    print(msg, flush=True)


def run_recall(study, workdir: str, log=_print) -> list[dict]:
    from linscale_jax.errors import Stopped
    from linscale_jax.run import signals
    from linscale_jax.study import workers

    os.makedirs(workdir, exist_ok=True)
    runs, t0 = build_runs(study, workdir), time.time()
    todo = [r for r in runs if load_result(study, r) is None]
    n_workers = max(1, min(int(study.workers), len(todo)))
    log(f"[recall] {len(runs)} runs ({len(runs) - len(todo)} stored), {n_workers} worker(s); "
        f"at most {max(r.steps for r in runs)} steps × {study.batch_size} sequences of {study.seq_len} tokens each")
    if n_workers > 1:
        out = workers.run_parallel(study, todo, {r.name: True for r in todo}, n_workers, process_run, log)
        if out["stopped"] or out.get("signal"):
            raise Stopped(f"[recall] stopped by {out.get('signal') or 'a signal'}: "
                          f"{', '.join(out['stopped']) or 'no run was under way'}; finished runs are "
                          "kept; re-run the same command to resume.")
        if out["failed"]:
            raise workers.RunsFailed("recall runs failed: " + "; ".join(f"{k}: {v}" for k, v in
                                                                        out["failed"].items()))
    else:
        for i, r in enumerate(todo):
            log(f"[recall] run {i + 1}/{len(todo)}: {r.name} | elapsed {time.time() - t0:.0f}s")
            try:
                process_run(study, r, log)
            except signals.Interrupted as e:
                raise Stopped(f"[recall] stopped by {e} during {r.name}; finished runs are kept; "
                              "re-run the same command to resume.") from None
    results = {r.name: load_result(study, r) for r in runs}
    write_runs_csv(runs, results, os.path.join(workdir, "recall_runs.csv"))
    at = lambda label: max_steps_of(study, label)  # noqa: E731  (the preset's steps for the label)
    chosen = best_lr(runs, results, float(study.stop_accuracy), at)
    rows = cell_rows(runs, results, study, chosen)
    write_csv(rows, os.path.join(workdir, "recall.csv"))
    written = ["recall.csv", "recall_runs.csv", "recall.png", "report.md"]
    if is_sweep(runs):
        rates = rates_record(runs, results, chosen, study, at)
        write_rates(os.path.join(workdir, "recall_rates.json"), rates)
        written.append("recall_rates.json")
    else:
        rates = read_rates(str(study.rates)) if not str(study.lr).strip() else None
    plot(rows, study, os.path.join(workdir, "recall.png"))
    update_report(os.path.join(workdir, "report.md"), report_section(rows, study, rates))
    log(f"[recall] wrote {workdir}/{', '.join(written)} in {time.time() - t0:.0f}s")
    return rows
