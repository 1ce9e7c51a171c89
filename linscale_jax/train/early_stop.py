"""Stop a run once a validation metric reaches a target: train.stop_at = "val_accuracy>=0.99".

    stop = EarlyStop(config, mesh, workdir, step)     # after the restore: step = the resumed step
    stop.done                                          # the run stopped early there: nothing to train
    row.update(stop.metrics(params, rest, eval_set))   # at an eval step: the metric, when the loop lacks it
    stop.reached(row)                                  # True at the first eval step that meets the target
    stop.metadata(step, row)                           # the checkpoint metadata that marks the stop

The forms: "val_accuracy>=T" (the share of weighted positions whose argmax is the target: MQAR's
recall of the queried values) and "val_loss<=T"; "" never stops. The loop evaluates every
train.eval_every steps (and at the last step), so the stop falls on an eval step; the loop saves a
checkpoint there whose metadata holds `early_stop` ({metric, target, value, step}), and a resumed
run whose newest checkpoint holds it trains no further (done).

    sums = prediction_sums(graphdef)   # jitted (params, rest, batch) -> (correct, count, ce sum)
"""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from linscale_jax.errors import UserError

FORMS = {"val_accuracy": ">=", "val_loss": "<="}  # metric -> the comparison that meets the target


class StopTargetError(UserError, ValueError):
    """train.stop_at is not one of the forms."""


@dataclasses.dataclass(frozen=True)
class Target:
    metric: str
    target: float

    def met(self, value: float) -> bool:
        return value >= self.target if FORMS[self.metric] == ">=" else value <= self.target

    def __str__(self) -> str:
        return f"{self.metric}{FORMS[self.metric]}{self.target:g}"


def parse(text: str) -> Target | None:
    """'val_accuracy>=0.99' -> Target; '' -> None."""
    text = str(text or "").strip()
    if not text:
        return None
    m = re.fullmatch(r"(\w+)\s*(>=|<=)\s*([-+0-9.eE]+)", text)
    if not m or FORMS.get(m.group(1)) != m.group(2):
        forms = ", ".join(f"{k}{v}T" for k, v in FORMS.items())
        raise StopTargetError(f"train.stop_at={text!r} is not a stop condition; write one of {forms} "
                              "(e.g. --config.train.stop_at=val_accuracy>=0.99) or '' for none")
    return Target(m.group(1), float(m.group(3)))


@functools.lru_cache(maxsize=8)
def prediction_sums(graphdef):
    """jitted (params, rest, batch) -> (correct, count, cross-entropy sum) over the positions whose
    weight is > 0 (correct: argmax == target)."""

    @jax.jit
    def sums(params, rest, batch):
        logits = nnx.merge(graphdef, params, rest)(batch["inputs"], segment_ids=batch["segment_ids"])
        logits = logits.astype(jnp.float32)
        q = batch["weights"] > 0
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
        return (jnp.sum((jnp.argmax(logits, -1) == batch["targets"]) & q), jnp.sum(q),
                jnp.sum(jnp.where(q, ce, 0.0)))

    return sums


class EarlyStop:
    """train.stop_at of one run (module docstring)."""

    def __init__(self, config, mesh, workdir, step: int):
        self.target = parse(config.train.get("stop_at", ""))
        if self.target is not None and int(config.train.eval_every) <= 0:
            raise StopTargetError(f"train.stop_at={self.target} is checked at the validation steps, but "
                                  "train.eval_every=0; set --config.train.eval_every=N")
        self.config, self.mesh, self.done, self._sums = config, mesh, False, None
        if self.target is not None and step > 0:
            from linscale_jax.run import checkpoint as ckpt

            self.done = bool(ckpt.load_metadata(workdir, step).get("early_stop"))

    def metrics(self, params, rest, eval_set) -> dict:
        """The target's metric where the loop does not compute it (val_accuracy): {} otherwise."""
        if self.target is None or self.target.metric != "val_accuracy":
            return {}
        if self._sums is None:
            from linscale_jax.models import ModelConfig
            from linscale_jax.parallel import sharding

            self._sums = prediction_sums(sharding.model_parts(ModelConfig.from_config(self.config.model)).graphdef)
        with jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh):  # as the loop's own steps
            out = [self._sums(params, rest, b) for b in eval_set]
        correct, count = (sum(int(x[i]) for x in out) for i in (0, 1))
        return {"val_accuracy": correct / max(count, 1)}

    def reached(self, row: dict) -> bool:
        return self.target is not None and self.target.metric in row and self.target.met(float(row[self.target.metric]))

    def metadata(self, step: int, row: dict | None) -> dict:
        """{"early_stop": ...} for the checkpoint of the step that reached the target, else {}."""
        if row is None or not self.reached(row):
            return {}
        return {"early_stop": dict(metric=self.target.metric, target=self.target.target,
                                   value=float(row[self.target.metric]), step=int(step))}

    def line(self, step: int, row: dict) -> str:
        return (f"Stopped early at step {step}: {self.target.metric} {float(row[self.target.metric]):.4g} "
                f"reached train.stop_at ({self.target}); checkpoint saved.")
