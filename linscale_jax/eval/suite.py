"""The evaluation tasks `python -m linscale_jax.eval --tasks=...` knows, one function each.

    TASKS[name](run: eval.loading.Run, ctx: TaskContext) -> dict of metric fields (JSON-friendly)

  val_loss     validation loss / ppl / bits per byte on the run's held-out split   (eval.val_loss)
  val_loss_avg the same for the mean weights of the checkpoints of the last quarter of the steps
  niah         needle in a haystack, standard mode; heatmap + grid under DIR/eval/niah/
  niah_easy    the same, easy mode (question and answer inserted)
  probe        multiple-choice probe from the run's corpus through lm-eval          (eval.probe)
  wikitext     word-level perplexity of a local file (--wikitext=PATH)              (eval.perplexity)
  lambada      LAMBADA last-word accuracy and ppl of a local file (--lambada=PATH)
  commonsense  the paper's 7 commonsense tasks through lm-eval (needs their datasets)
  scrolls      SCROLLS through lm-eval (needs its datasets)
NIAH grid: the paper's 35 x 35 by default, rescaled to the run's training context
(eval.niah.scaled_grid: 1000/8192 .. 16000/8192 of train.seq_len, i.e. up to 2x the context);
--niah_grid=LxD for a smaller one; TaskContext.niah_in_context keeps every length within the
trained context (eval.niah.context_grid: what a study measures).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field

import numpy as np

from linscale_jax.eval.loading import EvalError


@dataclass
class TaskContext:
    workdir: str
    step: int
    val_batches: int | None = None
    niah_grid: tuple[int, int] = (35, 35)
    niah_seed: int = 0
    niah_in_context: bool = False  # lengths within the trained context only (eval.niah.context_grid)
    probe_items: int = 64
    wikitext: str | None = None
    lambada: str | None = None
    limit: int | None = None  # lm-eval --limit for commonsense / scrolls
    progress: object = None  # callable(done, total) for long tasks
    extra: dict = field(default_factory=dict)

    def out_dir(self, *parts) -> str:
        d = os.path.join(self.workdir, "eval", *parts)
        os.makedirs(d, exist_ok=True)
        return d


def _lm(run, **kw):
    from linscale_jax.eval.lm_backend import LinscaleLM

    return LinscaleLM(model=run.model, vocab=run.vocab, max_length=int(run.config.train.seq_len), **kw)


def val_loss(run, ctx: TaskContext) -> dict:
    from linscale_jax.eval.val_loss import validation_loss

    return validation_loss(run.model, run.config, run.vocab, ctx.val_batches)


def val_loss_avg(run, ctx: TaskContext) -> dict:
    from linscale_jax.eval.val_loss import averaged_validation_loss

    return averaged_validation_loss(run.model, run.config, run.vocab, ctx.workdir, ctx.step, ctx.val_batches)


def _documents(config):
    from linscale_jax import data

    return itertools.chain(data.corpus_documents(config.data, "validation"),
                           data.corpus_documents(config.data, "train"))


def niah(run, ctx: TaskContext, mode: str = "standard") -> dict:
    from linscale_jax.eval import niah as nh
    from linscale_jax.eval import niah_metrics as nm
    from linscale_jax.eval.generate import Generator

    n_new_max = nh.ANSWER_TOKENS
    cap = int(run.model.cfg.max_seq_len) - 1 - n_new_max  # BOS + answer must fit the state
    grid = nh.context_grid if ctx.niah_in_context else nh.scaled_grid
    try:
        lengths, depths = grid(int(run.config.train.seq_len), *ctx.niah_grid, min_len=nh.min_length(run.encode, mode))
    except ValueError as e:
        raise EvalError(f"{e}; drop the niah task or train a longer context") from None
    if lengths[-1] > cap:
        raise EvalError(f"NIAH lengths up to {lengths[-1]} tokens need model.max_seq_len >= "
                        f"{lengths[-1] + 1 + n_new_max} (it is {cap + 1 + n_new_max}); use a smaller grid "
                        "or a model config with a larger max_seq_len")
    gen = Generator(run.model, chunk_size=min(256, int(run.config.train.seq_len)))
    state_len = int(lengths.max()) + 1 + n_new_max

    def generate(prompt, n_new):
        ids = np.array([[run.bos_id] + list(prompt)], np.int32)
        return gen.generate(ids, min(n_new, n_new_max), stop_id=run.eos_id, max_len=state_len)[0]

    sweep = nh.run_sweep(generate, run.encode, run.decode, _documents(run.config), lengths, depths,
                         mode=mode, seed=ctx.niah_seed, progress=ctx.progress)
    name = f"niah_{mode}_step{ctx.step}"
    d = ctx.out_dir("niah")
    png = os.path.join(d, name + ".png")
    nm.heatmap(sweep["scores"], sweep["lengths"], sweep["depths"], png,
               title=f"{run.metadata.get('run', '')} step {ctx.step} ({mode})")
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in sweep.items()}, f)
    out = nm.summarize(sweep["scores"], sweep["lengths"])
    out.update(niah_mode=mode, niah_heatmap=png, niah_grid=list(ctx.niah_grid))
    return out


def probe(run, ctx: TaskContext) -> dict:
    from linscale_jax.eval import probe as pr

    items = pr.build_items(_documents(run.config), n_items=ctx.probe_items, seed=0)
    return pr.run_probe(_lm(run), pr.write_task(items, ctx.out_dir("probe")))


def wikitext(run, ctx: TaskContext) -> dict:
    from linscale_jax.eval.perplexity import wikitext as wt

    if not ctx.wikitext:
        raise EvalError("task wikitext needs --wikitext=PATH (a local WikiText-2 style .txt or .jsonl)")
    return wt(_lm(run), ctx.wikitext)


def lambada(run, ctx: TaskContext) -> dict:
    from linscale_jax.eval.perplexity import lambada as lb

    if not ctx.lambada:
        raise EvalError("task lambada needs --lambada=PATH (a local LAMBADA style .jsonl with `text`)")
    return lb(_lm(run), ctx.lambada)


def lm_group(run, ctx: TaskContext, name: str) -> dict:
    from linscale_jax.eval.commonsense import run_group

    return run_group(_lm(run), name, limit=ctx.limit)


TASKS = {
    "val_loss": val_loss,
    "val_loss_avg": val_loss_avg,
    "niah": niah,
    "niah_easy": lambda run, ctx: niah(run, ctx, mode="easy"),
    "probe": probe,
    "wikitext": wikitext,
    "lambada": lambada,
    "commonsense": lambda run, ctx: lm_group(run, ctx, "commonsense"),
    "scrolls": lambda run, ctx: lm_group(run, ctx, "scrolls"),
}
