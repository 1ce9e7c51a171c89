"""Divergence: stop on a non-finite or exploding loss and name a checkpoint that is really good.

    mon = Monitor(start_step, math.log(vocab_size))
    mon.observe(step, loss, params_finite)  # a reason once diverged: the loop raises DivergenceError
    mon.health_metadata(step)               # {loss, running_loss}: stored in checkpoint metadata

A loss is *exploding* when it exceeds FACTOR x the running loss (the median of the last WINDOW
finite, non-exploding losses). The run stops as diverged on a non-finite loss or non-finite
parameters, on an exploding loss above `uniform` (ln V, a uniform guess over the vocabulary: the
model has lost what it learnt), or on exploding losses PERSIST steps in a row or on the run's last
steps (`at_end`). A lone step above FACTOR x but below ln V is not a divergence: near a loss of zero
a batch's mean over few target tokens is dominated by its rare wrong answers (a model at 98% MQAR
accuracy, median batch loss 0.04, puts about one batch in 75 above 3x the median and recovers at
the next step), so it marks its checkpoint as not good and training goes on. The row logged
at step s holds the loss of update s, i.e. the loss of the parameters after step s-1; so
checkpoint s is good when the loss computed on its parameters (the loss of step s+1) is finite and
within FACTOR of the running loss, and its parameters are finite. Checkpoints saved before this process started are judged by the loss and running loss stored in
their metadata; one without a loss (params only, written by `checkpoint.save_model`) is a starting
point and counts as good. The trainer waits for pending async saves, then names the newest good checkpoint
and the exact command that resumes from it (`--resume_step=N`) with a lower learning rate;
`--resume_step` moves the later (diverged) checkpoints aside, so the rerun cannot pick them up.
"""

from __future__ import annotations

import math
import shlex
import statistics
from linscale_jax.errors import UserError

FACTOR = 3.0
WINDOW = 20
PERSIST = 3  # steps in a row above FACTOR x the running loss that make a divergence
LR_CUT = 10.0  # suggested lr: min(optim.lr, the good checkpoint's lr) / LR_CUT, at most LR_CAP
LR_CAP = 1e-3  # above 1e-2 no AdamW LM here trains (presets use <= 3e-3): do not suggest 1e5


class DivergenceError(UserError, FloatingPointError):
    """Training diverged; `last_good` (None: no usable checkpoint) and `lr` suggest the way out."""

    def __init__(self, msg, step, last_good, lr):
        super().__init__(msg)
        self.step, self.last_good, self.lr = step, last_good, lr


class Monitor:
    def __init__(self, start_step: int, uniform: float):
        self.start, self.uniform = start_step, uniform  # ln V: a uniform guess's loss
        self.recent: list[float] = []
        self.healthy_after: dict[int, bool] = {}  # step s -> params after s gave a healthy loss
        self.params_ok: dict[int, bool] = {}
        self.above: list[tuple[int, float]] = []  # the current run of (step, loss) above FACTOR x

    def running(self) -> float | None:
        return statistics.median(self.recent) if self.recent else None

    def observe(self, step: int, loss: float, params_finite: bool) -> str | None:
        """Record step `step`; returns a reason string when it is diverged (None: training goes on)."""
        run = self.running()
        exploding = math.isfinite(loss) and run is not None and loss > FACTOR * run
        self.above = self.above + [(step, loss)] if exploding else []
        reason = None
        if not math.isfinite(loss):
            reason = f"loss is {loss}"
        elif exploding and loss > self.uniform:
            reason = self._exploded(run, f"and past ln V = {self.uniform:.4g}, a uniform guess's loss")
        elif len(self.above) >= PERSIST:
            reason = self._exploded(run, f"on {PERSIST} steps in a row")
        elif not params_finite:
            reason = f"parameters became non-finite (loss {loss:.4g})"
        self.healthy_after[step - 1] = math.isfinite(loss) and not exploding
        self.params_ok[step] = bool(params_finite)
        if reason is None and not exploding:
            self.recent = (self.recent + [loss])[-WINDOW:]
        return reason

    def _exploded(self, run: float, where: str) -> str:
        return (f"loss exploded past {FACTOR:g} x the running loss {run:.4g} {where} (steps "
                f"{self.above[0][0]}..{self.above[-1][0]}: {', '.join(f'{v:.4g}' for _, v in self.above)})")

    def at_end(self) -> str | None:
        """The reason when the run's last steps are exploding (fewer than PERSIST of them, with no step
        after them to recover in): the run ends diverged; None otherwise."""
        return self._exploded(self.running(), "on the run's last steps") if self.above else None

    def health_metadata(self, step: int, loss: float | None) -> dict:
        run = self.running()
        return dict(loss=None if loss is None else float(loss),
                    running_loss=None if run is None else float(run))

    def good(self, step: int, metadata: dict | None) -> bool:
        """Whether checkpoint `step` (with its stored metadata) is a safe place to resume."""
        if step in self.healthy_after:
            return self.healthy_after[step] and self.params_ok.get(step, True)
        if step > self.start:  # saved by this process, its loss not seen yet: unknown
            return False
        if step == self.start and self.start in self.healthy_after:
            return self.healthy_after[self.start]
        m = metadata or {}
        loss, run = m.get("loss"), m.get("running_loss")
        if loss is None:
            return True  # params only (save_model: converted or initial weights): a starting point
        return math.isfinite(loss) and (run is None or loss <= FACTOR * run)


def resume_command(argv: list[str], step: int | None, lr: float) -> str:
    """The user's command with --resume_step=N (0: from scratch) and the lower lr, for printing."""
    keep = [a for a in argv if not a.startswith(("--resume_step", "--config.optim.lr",
                                                 "--allow_config_change"))]
    if keep and keep[0].endswith(".py"):
        keep = ["python", "-m", "linscale_jax.train"] + keep[1:]
    return " ".join(shlex.quote(a) for a in keep + [f"--resume_step={step or 0}",
                                                    f"--config.optim.lr={lr:.3g}",
                                                    "--allow_config_change"])


def diverged(monitor: Monitor, step: int, reason: str, grad_norm: float, workdir, mngr, lr: float,
             record_checksums=None) -> DivergenceError:
    """Wait for pending saves, pick the newest good checkpoint, and build the error to raise."""
    from linscale_jax.run import checkpoint as ckpt

    mngr.wait_until_finished()  # a pending async save must not appear after the advice
    if record_checksums is not None:
        record_checksums(mngr.all_steps())
    steps = ckpt.list_steps(workdir)
    good = None
    for s in reversed(steps):
        if s < step and monitor.good(s, ckpt.load_metadata(workdir, s)):
            good = s
            break
    bad = [s for s in steps if good is None or s > good]
    good_lr = lr if good is None else float(
        ckpt.load_metadata(workdir, good).get("config", {}).get("optim", {}).get("lr", lr))
    new_lr = min(lr, good_lr) / LR_CUT
    new_lr = min(new_lr, LR_CAP) if lr > 10 * LR_CAP else new_lr
    where = (f"last good checkpoint: {good} (its loss is finite and within {FACTOR:g}x of the "
             f"running loss)" if good is not None else "no good checkpoint: start over")
    msg = (f"training diverged at step {step}: {reason} (grad_norm {grad_norm:.3g}); {where}"
           f"{f'; checkpoints {bad} are already diverged' if bad else ''}. Resume from it with a "
           f"lower learning rate (--resume_step={good or 0} --config.optim.lr={new_lr:.3g} "
           "--allow_config_change), or raise optim.warmup_steps / check the data.")
    return DivergenceError(msg, step, good, new_lr)
