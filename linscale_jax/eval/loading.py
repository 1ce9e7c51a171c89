"""Open a run for evaluation: the model of one checkpoint, its config, metadata and vocabulary.

    run = load_run(workdir, step=None)     # latest checkpoint by default
    run.model, run.config, run.metadata, run.vocab, run.encode(str), run.decode(ids), run.eos_id,
    run.bos_id (prepend it to a prompt: documents start with it in training)

Errors name the problem and the fix (missing workdir, no checkpoints, unknown step).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from linscale_jax.errors import UserError


class EvalError(UserError):
    """A user-facing evaluation error (bad workdir, checkpoint, task or data file)."""


class Tokens:
    """The special ids and the text codec of `self.vocab` (a seqio.Vocabulary), for a run and for
    the lm-eval backend alike."""

    vocab: Any

    @property
    def eos_id(self) -> int:
        return int(self.vocab.eos_id)

    @property
    def bos_id(self) -> int:
        """The input the trainer feeds at the first position of every document (vocab.pad_id)."""
        return int(self.vocab.pad_id)

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.vocab.encode(text)]

    def decode(self, ids) -> str:
        return self.vocab.decode([int(i) for i in ids])


@dataclass
class Run(Tokens):
    model: Any
    config: Any
    metadata: dict
    vocab: Any


def checkpoint_steps(workdir: str) -> list[int]:
    from linscale_jax.run import checkpoint as ckpt

    if not os.path.isdir(workdir):
        raise EvalError(f"workdir {workdir!r} does not exist; pass the --workdir of a training run")
    steps = ckpt.list_steps(workdir)
    if not steps:
        raise EvalError(f"no complete checkpoints under {os.path.join(workdir, 'checkpoints')}; train "
                        "the run first (python -m linscale_jax.train --workdir=...) or check the path")
    return list(steps)


def load_run(workdir: str, step: int | None = None) -> Run:
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax import data

    steps = checkpoint_steps(workdir)
    if step is not None and step not in steps:
        raise EvalError(f"no checkpoint at step {step} in {workdir}; available steps: {steps}")
    model, config, metadata = ckpt.load_model(workdir, step=steps[-1] if step is None else step)
    return Run(model=model, config=config, metadata=dict(metadata), vocab=data.get_vocabulary(config.data))
