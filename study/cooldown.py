"""Short learning-rate cooldowns branched off a constant-rate run (Hägele et al. 2024, "Scaling Laws
and Compute-Optimal Training Beyond Fixed Training Durations").

    workdir = cooldown(config, run_workdir, step, fraction, out_dir)   # -> out_dir, trained

The checkpoint of `step` (parameters, AdamW state, data-iterator position) is copied into
`out_dir`, and training resumes there for k = max(1, round(fraction · step)) more steps with the
learning rate decaying linearly from optim.lr to 0: the `wsd` schedule with total steps step + k and
decay_fraction k / (step + k), whose stable phase equals the constant rate the run was trained with,
so the branch continues the run exactly until `step` and then cools down on the run's own next
batches. The branch's final checkpoint (step + k) is the cooled-down model; its loss sits on a
cosine-like curve (smaller and much less noisy than the constant-rate checkpoint's).
"""

from __future__ import annotations

import copy
import os
import shutil


def cooldown_steps(step: int, fraction: float) -> int:
    if not 0 < fraction <= 1:
        raise ValueError(f"cooldown fraction must be in (0, 1], got {fraction}; e.g. 0.2 (Hägele et al.)")
    return max(1, int(round(fraction * step)))


def cooldown_config(config, step: int, fraction: float):
    """The run's config for its cooldown branch from `step` (see the module docstring)."""
    if str(config.optim.schedule) != "constant":
        raise ValueError(f"cooldowns branch off a constant-rate run; optim.schedule is "
                         f"{config.optim.schedule!r}. Train with optim.schedule=constant")
    k = cooldown_steps(step, fraction)
    cfg = copy.deepcopy(config)
    cfg.train.steps = step + k
    cfg.optim.update(schedule="wsd", decay_fraction=k / (step + k), min_lr_ratio=0.0)
    cfg.checkpoint.update(every_steps=0, log_spaced=0, keep=0)  # only the cooled-down final step
    cfg.train.eval_every = 0
    return cfg


def cooldown(config, run_workdir: str, step: int, fraction: float, out_dir: str) -> str:
    """Train the cooldown branch of `run_workdir`'s checkpoint `step` in `out_dir` (resumable)."""
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.train import loop as trainer

    cfg = cooldown_config(config, step, fraction)
    total = int(cfg.train.steps)
    have = ckpt.list_steps(out_dir) if os.path.isdir(out_dir) else []
    if have and have[-1] >= total:
        return out_dir
    if not have:
        if step not in ckpt.list_steps(run_workdir):
            raise FileNotFoundError(f"{run_workdir} has no complete checkpoint at step {step} to cool "
                                    f"down from; it has {ckpt.list_steps(run_workdir)}")
        shutil.copytree(ckpt.ckpt_dir(run_workdir) / str(step), ckpt.ckpt_dir(out_dir) / str(step))
    # the branch changes only the schedule of the run it copies: an intended change, recorded
    summary = trainer.train(cfg, out_dir, allow_config_change=True)
    if summary.get("stopped"):
        raise KeyboardInterrupt(f"cooldown {out_dir} stopped by {summary['stopped']}; re-run to resume")
    return out_dir
