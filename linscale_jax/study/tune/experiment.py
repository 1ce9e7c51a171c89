"""Per-size tuning of the peak learning rate, batch and AdamW β2 (Porian et al. 2024), pruned: the
steps of the "tune" kind (study.experiments).

    python -m linscale_jax.study --config=tune --workdir=DIR [--dry_run]
    runs = plan(study, workdir)          # the next stage's cells not measured yet ([]: all done)
    process_cell(study, run, log, final)  # one cell: a scaling run, a divergence marked
    joined = join(study, runs, workdir, ctx); report(study, workdir, joined, ctx)   # DIR/tune/

Every cell is one scaling run (scaling.plan, scaling.runner.process_run, on any backend of the
executor, with its progress lines and resume): one arch and ladder size trained on the preset's
token budget with lr = tune.lr_base·2^k, `batch` sequences per step (steps = tokens /
(batch·seq_len)), AdamW β2, a constant rate after a warmup of tune.warmup_tokens_per_param·N
tokens (N non-embedding); its loss is the validation loss at the budget's end under the cooldown
estimator (scaling.cooldown: the last checkpoint cooled down over 10 % more steps). A cell the
trainer stops as diverged (DivergenceError) is marked (DIR/runs/<cell>/diverged.txt) and counts as
an infinite loss. Runs are DIR/runs/<arch>-<size>-lr<lr>-bs<b>-beta2_<β2>[-seed<s>].

The cells and the stages that prune the grid: tune.grid. Outputs, DIR/tune/: cells.csv and
cells.md (every cell: loss under cooldown, val_loss at the end, the stage's best marked), rule.json
(the fitted rules with intervals, provenance and every cell's loss: the file linscale_jax.train.rule
reads; the package ships one as linscale_jax/train/tuned_rule.json), lr.png (loss against learning
rate per size, a line per (batch, β2)).
"""

from __future__ import annotations

import math
import os

from linscale_jax.study.scaling import plan as plan_lib
from linscale_jax.study.tune import outputs
from linscale_jax.study.tune.grid import all_cells, make_run

DIVERGED = "diverged.txt"  # DIR/runs/<cell>/diverged.txt: the trainer stopped the run as diverged


def read_loss(run) -> tuple[float, float] | None:
    """(loss under cooldown at the budget's end, val_loss at the last checkpoint) of a finished
    cell; (inf, inf) for a diverged one; None when not finished."""
    from linscale_jax.eval.runner import read_results
    from linscale_jax.study.scaling import runner

    if os.path.exists(os.path.join(run.workdir, DIVERGED)):
        return math.inf, math.inf
    final = [r for r in read_results(run.workdir) if r["task"] == "val_loss" and int(r["step"]) == run.steps]
    dirs = runner.cooldown_dirs(run)
    cool = [r for d in dirs for r in read_results(d) if r["task"] == "val_loss"]
    if not final or not dirs or not cool:
        return None
    last = max(cool, key=lambda r: int(r["step"]))
    return float(last["val_loss"]), float(final[0]["val_loss"])


def process_cell(study, run, log=print, final: bool = False) -> None:
    """One cell: scaling.runner.process_run (train, evaluate, cooldown); a run the trainer stops as
    diverged is marked (DIVERGED), an infinite loss, not a failure."""
    from linscale_jax.study.scaling import runner
    from linscale_jax.train.divergence import DivergenceError

    try:
        runner.process_run(study, run, log=log, final=False)
    except DivergenceError as e:
        with open(os.path.join(run.workdir, DIVERGED), "w") as f:
            f.write(f"{e}\n")
        log(f"[tune] {run.name} diverged: counted as an infinite loss")


def measured(study, workdir: str, cells) -> dict:
    """{cell: (loss, val_loss)} of the finished cells among `cells`."""
    out = {}
    for i, c in enumerate(cells):
        got = read_loss(make_run(study, c, workdir, i))
        if got is not None:
            out[c] = got
    return out


def grid_state(study, workdir: str) -> tuple[dict, list]:
    """(every measured cell the stages ask for so far {cell: (loss, val_loss)}, the cells they ask
    for): the stages move on over cells finished earlier (a resumed grid) before anything trains."""
    seen: dict = {}
    while True:
        want = all_cells(study, {c: v[0] for c, v in seen.items()})
        found = measured(study, workdir, [c for c in want if c not in seen])
        if not found:
            return seen, want
        seen.update(found)


def plan(study, workdir: str) -> list:
    """The runs of the cells the current stage asks for and no run has measured."""
    seen, want = grid_state(study, workdir)
    return [make_run(study, c, workdir, i) for i, c in enumerate(c for c in want if c not in seen)]


def dry_run(study, runs, spec: str | None = None) -> str:
    return (plan_lib.dry_run_text(runs, spec) + "\n[tune] the later stages depend on these runs' losses "
            "(linscale_jax.study.tune.grid's module docstring)")


def join(study, runs, workdir: str, ctx) -> dict:
    """DIR/tune/cells.csv and rule.json from every measured cell."""
    return outputs.join(study, workdir, grid_state(study, workdir)[0])


def report(study, workdir: str, joined: dict, ctx) -> str:
    return outputs.report(study, joined, ctx.log)
