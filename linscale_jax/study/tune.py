"""Per-size tuning of the peak learning rate, batch and AdamW β2 (Porian et al. 2024), pruned.

    python -m linscale_jax.study --config=configs/study/tune.py --workdir=DIR [--dry_run]
    run_tune(study, workdir)      # trains the grid stage by stage, then writes DIR/tune/

Every cell is one study run (study.plan, study.runner.process_run, the study's worker pool, its
progress lines and resume): one arch and ladder size trained on the preset's token budget with
lr = tune.lr_base·2^k, `batch` sequences per step (steps = tokens / (batch·seq_len)), AdamW β2,
a constant rate after a warmup of tune.warmup_tokens_per_param·N tokens (N non-embedding); its
loss is the validation loss at the budget's end under the cooldown estimator (study.cooldown: the
last checkpoint cooled down over 10 % more steps). Runs are DIR/runs/<arch>-<size>-lr<lr>-bs<b>-
beta2_<β2>[-seed<s>].

The cells and the stages that prune the grid: study.tune_grid. Outputs, DIR/tune/: cells.csv and cells.md (every cell: loss under cooldown, val_loss at the end,
the stage's best marked), rule.json (the fitted rules with intervals, provenance and every cell's
loss: the file linscale_jax.train.rule reads; the repo ships one as linscale_jax/train/tuned_rule.json),
lr.png (loss against learning rate per size, a line per (batch, β2)), summary.md.
"""

from __future__ import annotations

import math
import os

from linscale_jax.study import plan as plan_lib
from linscale_jax.study.tune_grid import all_cells, make_run
from linscale_jax.study.tune_outputs import _print, write_outputs

DIVERGED = "diverged.txt"  # DIR/runs/<cell>/diverged.txt: the trainer stopped the run as diverged


def read_loss(run) -> tuple[float, float] | None:
    """(loss under cooldown at the budget's end, val_loss at the last checkpoint) of a finished
    cell; (inf, inf) for a diverged one; None when not finished."""
    from linscale_jax.eval.runner import read_results
    from linscale_jax.study import runner

    if os.path.exists(os.path.join(run.workdir, DIVERGED)):
        return math.inf, math.inf
    final = [r for r in read_results(run.workdir) if r["task"] == "val_loss" and int(r["step"]) == run.steps]
    dirs = runner.cooldown_dirs(run)
    cool = [r for d in dirs for r in read_results(d) if r["task"] == "val_loss"]
    if not final or not dirs or not cool:
        return None
    last = max(cool, key=lambda r: int(r["step"]))
    return float(last["val_loss"]), float(final[0]["val_loss"])


def _train(study, runs: list, workdir: str, log) -> None:
    """Process `runs` with the study's machinery (the worker pool when study.workers > 1); a run the
    trainer stops as diverged is marked (DIVERGED) and counts as an infinite loss."""
    from linscale_jax.study import runner, workers

    n = runner.workers_for(study, len(runs), None)
    finals = {r.name: False for r in runs}
    failed = {}
    if n > 1:
        out = workers.run_parallel(study, runs, finals, n, runner.process_run, log, runner.eta_seconds)
        if out["stopped"] or out.get("signal"):
            from linscale_jax.errors import Stopped

            raise Stopped(f"[tune] stopped by {out.get('signal') or 'a signal'}; re-run the same command "
                          "to resume")
        failed = out["failed"]
    else:
        from linscale_jax.train.divergence import DivergenceError

        for k, r in enumerate(runs):
            log(f"[tune] run {k + 1}/{len(runs)}: {r.name}")
            try:
                runner.process_run(study, r, log=log, final=False)
            except DivergenceError as e:
                failed[r.name] = f"DivergenceError: {e}"
    by = {r.name: r for r in runs}
    rest = {}
    for name, why in failed.items():
        if why.startswith("DivergenceError"):
            with open(os.path.join(by[name].workdir, DIVERGED), "w") as f:
                f.write(why + "\n")
            log(f"[tune] {name} diverged: counted as an infinite loss")
        else:
            rest[name] = why
    if rest:
        from linscale_jax.study.workers import RunsFailed

        raise RunsFailed(f"{len(rest)} tuning run(s) failed, the others finished; fix and re-run to "
                         "resume: " + "; ".join(f"{k}: {v}" for k, v in rest.items()))


def measured(study, workdir: str, cells) -> dict:
    """{cell: (loss, val_loss)} of the finished cells among `cells`."""
    out = {}
    for i, c in enumerate(cells):
        got = read_loss(make_run(study, c, workdir, i))
        if got is not None:
            out[c] = got
    return out


def run_tune(study, workdir: str, dry_run: bool = False, log=_print) -> dict:
    """Train the staged grid (module) in `workdir`, then write DIR/tune/; resumable."""
    from linscale_jax.study.tune_check import check_tune

    check_tune(study)  # every stage's fields, before anything trains
    os.makedirs(workdir, exist_ok=True)
    seen: dict = {}
    stage = 0
    while True:
        want = all_cells(study, {c: v[0] for c, v in seen.items()})
        found = measured(study, workdir, [c for c in want if c not in seen])
        if found:  # finished earlier (a resumed grid): the stages may move on before anything trains
            seen.update(found)
            continue
        todo = [c for c in want if c not in seen]
        if dry_run:
            runs = [make_run(study, c, workdir, i) for i, c in enumerate(todo)]
            print(plan_lib.dry_run_text(runs))
            print(f"[tune] {len(seen)} cell(s) measured; the later stages depend on these runs' losses "
                  "(python -m linscale_jax.study.tune's module docstring)")
            return {"todo": [r.name for r in runs], "measured": len(seen)}
        if not todo:
            break
        stage += 1
        log(f"[tune] round {stage}: {len(todo)} run(s) to train, {len(seen)} measured")
        _train(study, [make_run(study, c, workdir, i) for i, c in enumerate(todo)], workdir, log)
        seen.update(measured(study, workdir, todo))
    return write_outputs(study, workdir, seen, log)
