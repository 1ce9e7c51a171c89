"""AdamW with the paper's defaults (lr 3e-4, weight decay 0.1), learning-rate schedules, clipping.

Schedules (optim.schedule), all with a linear warmup from 0 over optim.warmup_steps:
  constant  warmup, then optim.lr
  cosine    warmup, then cosine decay to optim.lr * optim.min_lr_ratio at train.steps
  wsd       warmup-stable-decay: warmup, optim.lr, then a linear decay over the last
            optim.decay_fraction of the steps to optim.lr * optim.min_lr_ratio
Weight decay applies to weight matrices and the embedding: parameters with >= 2 dims, not counting
a stacked 'layers' axis or dims with the logical name 'gain' (per-channel gains and rates laid out
as a table: LRPE θ [h, e], the xmixers TPE vectors). Norms, gains, decay rates and biases are not
decayed (HGRN2's lower bounds, cosFormer2's TPE rates, LRPE θ). Gradients are clipped to a
global norm of optim.clip_norm (0 disables) before AdamW. Gradient accumulation is exact and lives
in the train step (a scan over micro-batches, linscale_jax.train.loop). Parameters and optimizer state
are float32; model.dtype sets the compute dtype.

The constant schedule's peak rate may be an argument of the compiled step (`runtime_lr`,
make_optimizer(..., lr=traced scalar)): its ramp and plateau compute with the rate exactly as with
the Python float, so runs that differ only in optim.lr (a tuning grid's cells, replicate seeds)
share one compiled program, bit for bit (tests/train/test_blocks.py). cosine and wsd fold the rate
into Python-side constants (the decay's floor ratio) and keep it in the program.
"""

from __future__ import annotations

import jax
import optax

SCHEDULES = ("constant", "cosine", "wsd")


def runtime_lr(optim_cfg) -> bool:
    """Whether the peak rate can be an argument of the compiled step (the constant schedule)."""
    return optim_cfg.schedule == "constant"


def make_schedule(optim_cfg, total_steps: int, lr=None) -> optax.Schedule:
    """The schedule of optim_cfg over total_steps; `lr` (a traced float32 scalar, the constant
    schedule only: runtime_lr) replaces optim.lr as the peak."""
    lr_cfg, warmup = float(optim_cfg.lr), int(optim_cfg.warmup_steps)
    if optim_cfg.schedule not in SCHEDULES:
        raise ValueError(
            f"optim.schedule={optim_cfg.schedule!r} is not supported; choose one of {SCHEDULES}."
        )
    bad = [f"{name} {need} (got {got})" for name, need, got, ok in (
        ("train.steps", ">= 1", total_steps, total_steps >= 1), ("optim.lr", "> 0", lr_cfg, lr_cfg > 0),
        ("optim.warmup_steps", ">= 0", warmup, warmup >= 0)) if not ok]
    if bad:
        raise ValueError(f"need {'; '.join(bad)}; pass e.g. --config.{bad[0].split()[0]}=... with "
                         "such a value.")
    if lr is not None and not runtime_lr(optim_cfg):
        raise ValueError(f"optim.schedule={optim_cfg.schedule!r} keeps its peak rate in the program; "
                         "only the constant schedule takes it as an argument")
    peak = lr_cfg if lr is None else lr
    warmup = min(warmup, total_steps)
    ramp = optax.linear_schedule(0.0, peak, warmup) if warmup else optax.constant_schedule(peak)
    if optim_cfg.schedule == "constant":
        return optax.join_schedules([ramp, optax.constant_schedule(peak)], [warmup])
    lr, end = lr_cfg, lr_cfg * float(optim_cfg.min_lr_ratio)
    if optim_cfg.schedule == "cosine":
        cos = optax.cosine_decay_schedule(lr, max(total_steps - warmup, 1), alpha=end / lr)
        return optax.join_schedules([ramp, cos], [warmup])
    n_decay = max(int(round(total_steps * float(optim_cfg.decay_fraction))), 1)
    stable_end = max(total_steps - n_decay, warmup)
    return optax.join_schedules(
        [ramp, optax.constant_schedule(lr), optax.linear_schedule(lr, end, n_decay)],
        [warmup, stable_end],
    )


NOT_MATRIX_AXES = ("layers", "gain")  # logical dims that do not make a parameter a matrix


def decay_mask(param_axes, abstract_params):
    """True where weight decay applies: >= 2 dims, not counting 'layers' and 'gain' dims."""

    def decays(names, x):
        n = len(names) if names is not None else x.ndim
        n -= sum(1 for a in (names or ()) if a in NOT_MATRIX_AXES)
        return n >= 2

    return jax.tree.map(decays, param_axes, abstract_params,
                        is_leaf=lambda x: x is None or isinstance(x, tuple))


def make_optimizer(optim_cfg, total_steps: int, param_axes, abstract_params, lr=None
                   ) -> optax.GradientTransformation:
    """Global-norm clipping followed by AdamW on the schedule of the `optim` config section (`lr`:
    the peak rate as a traced scalar, make_schedule)."""
    o = optim_cfg
    sched = make_schedule(o, int(total_steps), lr)
    adamw = optax.adamw(
        sched, b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay,
        mask=decay_mask(param_axes, abstract_params),
    )
    if o.clip_norm and o.clip_norm > 0:
        return optax.chain(optax.clip_by_global_norm(o.clip_norm), adamw)
    return adamw
