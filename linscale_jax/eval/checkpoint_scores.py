"""Each checkpoint's validation loss scored from the trainer's parameters in memory.

    scores = CheckpointScores(config, workdir, val_batches)   # None or 0: off
    trainer.train(config, workdir, scores=scores)   # the trainer calls, at each checkpoint:
    scores.score(step, params, metadata)      # at the save: the figures, held
    scores.write(steps)                       # once those checkpoints are finalised: their rows

The row of step s is the `val_loss` row that `eval.runner.evaluate(workdir, tasks=("val_loss",),
ctx_kwargs=dict(val_batches=val_batches))` writes to DIR/eval/results.jsonl after restoring the
checkpoint, bit for bit: the model is built as load_model builds it (checkpoint.model_of_params: the
same graph, state and placement), its parameters are the values the checkpoint stores, and the
scoring is eval's own (eval.val_loss.dispatch / metrics: the same program, batches and sums), read
at once (no device arrays stay live until the write: the trainer's memory row walks them). Eval
then finds the row done and restores nothing. A row is written only after its checkpoint is
finalised (a failed or killed write leaves no row), a step already in the results (a resume that
writes it again) is not scored twice, and a torn last line of a killed run is dropped first
(eval.runner.read_results). One process only: with several, eval scores the checkpoints as
before (each process its share of the batches). `eval_seconds` is the scoring's own seconds.
"""

from __future__ import annotations

import os
import time

import jax


class CheckpointScores:
    """The val_loss rows of a run's checkpoints on `val_batches` validation batches (see module)."""

    def __init__(self, config, workdir, val_batches: int | None):
        self.on = bool(val_batches) and int(val_batches) > 0 and jax.process_count() == 1
        self.config, self.workdir, self.n = config, str(workdir), int(val_batches or 0)
        self.pending, self.done, self.vocab = {}, None, None

    def _open(self) -> None:
        """The vocabulary and the steps already scored, read at the first checkpoint (the
        trainer holds the workdir's lock by then); a torn last line is dropped."""
        from linscale_jax import data
        from linscale_jax.eval import runner

        self.vocab = data.get_vocabulary(self.config.data)
        os.makedirs(os.path.dirname(runner.results_path(self.workdir)), exist_ok=True)
        self.done = {int(r["step"]) for r in runner.read_results(self.workdir, repair=True)
                     if r.get("task") == "val_loss"}

    def score(self, step: int, params, metadata: dict) -> None:
        """Score checkpoint `step` (its `params`, a pure dict of arrays, and the metadata it is
        saved with); `write` writes the row."""
        if not self.on:
            return
        if self.done is None:
            self._open()
        if step in self.done:
            return
        from linscale_jax.eval import val_loss
        from linscale_jax.run import checkpoint as ckpt

        t0 = time.perf_counter()
        config = ckpt.config_from_metadata(metadata)  # the config eval reads back from the checkpoint
        model = ckpt.model_of_params(config, params)
        figures = val_loss.metrics(val_loss.dispatch(model, config, self.vocab, self.n))
        self.pending[step] = (figures, metadata, time.perf_counter() - t0)

    def write(self, steps) -> None:
        """The rows of the finalised checkpoints `steps` scored by `score`, appended to
        DIR/eval/results.jsonl (and to the run's W&B run where train.wandb is set)."""
        from linscale_jax.eval import runner
        from linscale_jax.train import tracking

        rows = []
        for step in steps:
            if step not in self.pending:
                continue
            figures, meta, seconds = self.pending.pop(step)
            row = runner.make_row("val_loss", meta, seconds, figures)
            runner.append_row(self.workdir, row)
            self.done.add(step)
            rows.append(row)
        if rows:
            tracking.log_eval(self.workdir, meta.get("config", {}), rows, meta.get("cooldown_from"))
