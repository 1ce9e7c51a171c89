"""Short learning-rate cooldowns branched off a constant-rate run (Hägele et al. 2024, "Scaling Laws
and Compute-Optimal Training Beyond Fixed Training Durations").

    out_dir = cooldown(config, run_workdir, step, fraction, out_dir, shape="1-sqrt")
    steps = branch_steps(config, points)       # where a study branches: the last checkpoint, half, ...

The checkpoint of `step` (parameters, AdamW state, data-iterator position) is restored and trained
for k = max(1, round(fraction · step)) more steps on the run's own next batches with the learning
rate decaying from optim.lr towards 0: the update of cooldown step j (j = 1..k) is lr · f((j−1)/k),
f(t) = 1 − sqrt(t) ("1-sqrt", Hägele et al.'s better shape) or 1 − t ("linear"). The branch
runs the run's own compiled blocks of train steps (train.loop.scaled_steps: compiled once per
process, so after training a branch compiles nothing) and scales each update: AdamW's update is
linear in the learning rate and its moments do not depend on it, so params + f·(step(params) −
params) is exactly the step at rate f·lr. The cooled-down parameters are saved as checkpoint step + k of
`out_dir` (a workdir that eval reads like any run's); the branch leaves the run's own checkpoints
untouched.
"""

from __future__ import annotations

import os

import numpy as np

SHAPES = ("1-sqrt", "linear")


def cooldown_steps(step: int, fraction: float) -> int:
    if not 0 < fraction <= 1:
        raise ValueError(f"cooldown fraction must be in (0, 1], got {fraction}; e.g. 0.2 (Hägele et al.)")
    return max(1, int(round(fraction * step)))


def lr_factors(k: int, shape: str) -> np.ndarray:
    """[k] multipliers of the constant rate for the k cooldown updates."""
    if shape not in SHAPES:
        raise ValueError(f"cooldown shape {shape!r} is not supported; choose one of {SHAPES}")
    t = np.arange(k) / k
    return 1 - np.sqrt(t) if shape == "1-sqrt" else 1 - t


def branch_steps(config, points: int) -> list[int]:
    """The run's checkpoint steps to branch `points` cooldowns from: its last checkpoint, then
    halving (a spread in ln C for the envelope), each snapped to a checkpoint after the warmup."""
    from linscale_jax.run import checkpoint as ckpt

    total = int(config.train.steps)
    saved = sorted(ckpt.save_steps(config.checkpoint, total) | {total})
    warm = int(config.optim.warmup_steps)
    saved = [s for s in saved if s > warm]
    out = []
    for i in range(int(points)):
        want = total / 2 ** i
        s = min(saved, key=lambda x: abs(np.log(x / want)))
        if s not in out:
            out.append(s)
    return sorted(out)


def cooldown(config, run_workdir: str, step: int, fraction: float, out_dir: str,
             shape: str = "1-sqrt", val_batches: int | None = None) -> str:
    """Train the cooldown branch of `run_workdir`'s checkpoint `step` into `out_dir` (see module);
    a branch already saved there is kept. val_batches=N: the branch checkpoint's val_loss row
    scored from the parameters in memory (eval.checkpoint_scores), as the trainer does."""
    import jax

    from linscale_jax import data
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.run import checksums
    from linscale_jax.train import loop as trainer
    from linscale_jax.eval.checkpoint_scores import CheckpointScores

    if str(config.optim.schedule) != "constant" or step < int(config.optim.warmup_steps):
        raise ValueError(f"cooldowns branch off a constant rate after the warmup; got optim.schedule="
                         f"{config.optim.schedule!r}, step {step} (warmup {config.optim.warmup_steps}). "
                         "Train with optim.schedule=constant")
    k = cooldown_steps(step, fraction)
    factors = lr_factors(k, shape)
    final = step + k
    if os.path.isdir(out_dir) and final in ckpt.list_steps(out_dir):
        return out_dir
    if step not in ckpt.list_steps(run_workdir):
        raise FileNotFoundError(f"{run_workdir} has no complete checkpoint at step {step} to cool down "
                                f"from; it has {ckpt.list_steps(run_workdir)}")
    fns, _ = trainer.step_functions(config)
    src = ckpt.manager(run_workdir, read_only=True)
    try:
        r = ckpt.restore(src, run_workdir, fns.abs_params, fns.abs_opt, step=step)
    finally:
        src.close()
    if r is None or r["opt_state"] is None or r["data"] is None:
        raise FileNotFoundError(f"{run_workdir} has no complete checkpoint (params, optimizer, data "
                                f"position) at step {step} to cool down from; it has "
                                f"{ckpt.list_steps(run_workdir)}")
    data.train_rows(config).check_state(r["data"])  # the batches follow from the step
    params, _ = trainer.scaled_steps(config, r["params"], r["opt_state"], step, factors)
    meta = ckpt.make_metadata(config, final, dict(cooldown_from=int(step), cooldown_steps=k,
                                                  cooldown_shape=shape))
    mngr = ckpt.manager(out_dir)
    scores = CheckpointScores(config, out_dir, val_batches)
    try:
        ckpt.save(mngr, final, params, meta)
        scores.score(final, params, meta)
        mngr.wait_until_finished()
    finally:
        mngr.close()
    scores.write([final])  # once the checkpoint is finalised
    if jax.process_index() == 0:
        checksums.record(ckpt.ckpt_dir(out_dir) / str(final))
    return out_dir
