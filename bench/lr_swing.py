"""How much of the late-checkpoint swing of the raw validation loss the learning rate explains.

    python bench/lr_swing.py [--config=configs/study/cpu.py] [--run=llama-d32] [--lrs=3e-3,1e-3,3e-4]
                             [--workdir=/tmp/lr_swing]

Trains one size of the study preset at each constant learning rate, side by side in one process
(same data order, same initialisation, same validation sample of the preset's eval.val_batches),
and evaluates every checkpoint's own weights. Prints per rate: the final loss, and over the late
checkpoints (the second half of the run) the sd of successive differences (/√2: the per-point sd
if the points were independent) and the share of checkpoints whose loss rises.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> None:
    from linscale_jax import data
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.train import loop as trainer
    from linscale_jax.study import presets
    from linscale_jax.study.noise import measure as noise
    from linscale_jax.study.scaling import plan

    p = argparse.ArgumentParser(prog="bench/lr_swing.py", description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/study/cpu.py")
    p.add_argument("--run", default="llama-d32")
    p.add_argument("--lrs", default="3e-3,1e-3,3e-4")
    p.add_argument("--workdir", default="/tmp/lr_swing")
    a = p.parse_args(argv)
    study = presets.preset(a.config)
    arch, size = a.run.split("-")
    base = plan.run_config(study, arch, size)
    batches = data.eval_batches(base, split="validation", num_batches=int(study.eval.val_batches))
    rows = []
    for lr in (float(x) for x in a.lrs.split(",")):
        cfg = plan.run_config(study, arch, size)  # the rule's batch, b2, warmup; this lr
        cfg.optim.update(lr=lr, rule="paper")
        wd = os.path.join(a.workdir, f"{a.run}-lr{lr:g}")
        t0 = time.time()
        trainer.train(cfg, wd)
        steps = ckpt.list_steps(wd)
        loss = np.array([noise.loss_at(noise.batch_losses(ckpt.load_model(wd, s)[0], batches),
                                        len(batches)) for s in steps])
        late = loss[len(loss) // 2:]
        d = np.diff(late)
        rows.append((lr, steps[-1], loss[-1], float(np.std(d, ddof=1)), float(np.std(d, ddof=1) / np.sqrt(2)),
                     float(np.mean(d > 0)), float(late.mean()), time.time() - t0))
        print(f"lr {lr:g}: {time.time() - t0:.0f}s", flush=True)
    print(f"\n{a.run} ({a.config}: {base.train.steps} steps, checkpoint every "
          f"{base.checkpoint.every_steps}, {len(batches)} validation batches; late = second half)\n")
    print("| lr | final step | final loss | late mean | sd of successive differences | /√2 | rising share | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for lr, s, fl, sd, sd1, rise, mean, sec in rows:
        print(f"| {lr:g} | {s} | {fl:.4f} | {mean:.4f} | {sd:.4f} | {sd1:.4f} | {rise:.0%} | {sec:.0f} |")


if __name__ == "__main__":
    main()
