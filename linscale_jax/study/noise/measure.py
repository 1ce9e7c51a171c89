"""Measure the noise sources of a study's loss points on one small size.

    python -m linscale_jax.study.noise --workdir=DIR [--config=configs/study/cpu.py] [--arch=llama]
        [--size=d16] [--steps=384] [--every=32] [--seeds=3] [--val=2,8,32] [--cooldown=0.2]
        [--cooldowns=3] [--average=0.25]

Trains `seeds` runs of one size with the preset's constant learning rate (run i: train.seed =
data.seed = i, so initialisation and data order both change), a checkpoint every `every` steps.
Every checkpoint is evaluated on the largest validation sample (max of --val, batches of the
preset's batch × seq_len tokens, one fixed sample for all runs), batch by batch, so that the loss on
the first v batches gives each smaller sample size for free. Measured, per estimator of a
checkpoint's loss:

  raw@v      the checkpoint's weights on the first v validation batches
  avg@v      the mean weights of the checkpoints in the last `average` fraction of the steps so
             far (eval.val_loss.averaged_model: the study's val_loss_avg, an offline EMA)
  cool@v     a cooldown branch (study.cooldown: linear decay to 0 over `cooldown` ×
             step more steps) from each of the last `cooldowns` checkpoints

and for each: checkpoint-to-checkpoint sd (RMS residual of each run's late checkpoints — the second
half — around a quadratic in ln step, pooled over runs; and the share of successive checkpoints
whose loss goes up), run-to-run sd (sd over seeds at the last checkpoint), and for raw@v the
evaluation-sample sd (sd of the last checkpoint's loss over disjoint v-batch samples). Writes
DIR/noise.json and DIR/noise.md (the table).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from linscale_jax import contract


def study_preset(preset: str):
    """The study preset's ConfigDict (a path relative to the repository or absolute)."""
    import importlib.util
    from pathlib import Path

    from linscale_jax.study import plan

    path = Path(preset)
    path = path if path.is_absolute() else plan.REPO / path
    spec = importlib.util.spec_from_file_location(f"_noise_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


def run_config(study, arch: str, size: str, steps: int, every: int, seed: int):
    from linscale_jax.study import plan

    cfg = plan.run_config(study, arch, size)
    if str(cfg.optim.schedule) != "constant":
        raise ValueError(f"the noise experiment needs a constant-rate preset; {cfg.optim.schedule!r} given")
    cfg.train.steps = int(steps)
    cfg.train.seed = int(seed)
    cfg.data.seed = int(seed)
    cfg.checkpoint.update(every_steps=int(every), log_spaced=0, keep=0)
    cfg.name = f"{arch}-{size}-seed{seed}"
    return cfg


def batch_losses(params_model, eval_batches) -> np.ndarray:
    """[v, 2]: (sum nll, scored tokens) of every validation batch."""
    import jax.numpy as jnp
    from flax import nnx

    from linscale_jax.eval.val_loss import nll_fn

    graphdef, params = nnx.split(params_model)
    fn = nll_fn(graphdef)
    out = [fn(params, *(jnp.asarray(b[k]) for k in ("inputs", "targets", "segment_ids", "weights")))
           for b in eval_batches]
    return np.array([[float(s), float(w)] for s, w in out])


def loss_at(bl: np.ndarray, v: int) -> float:
    return float(bl[:v, 0].sum() / bl[:v, 1].sum())


def sample_sd(bl: np.ndarray, v: int) -> float:
    """sd of the loss over disjoint v-batch samples of the batches in `bl` (needs >= 2 groups)."""
    g = len(bl) // v
    if g < 2:
        return float("nan")
    vals = [loss_at(bl[i * v:(i + 1) * v], v) for i in range(g)]
    return float(np.std(vals, ddof=1))


def measure(workdir: str, preset: str = "configs/study/cpu.py", arch: str = contract.BASELINE_ARCH,
            size: str = "d16",
            steps: int = 384, every: int = 32, seeds: int = 3, val=(2, 8, 32), cooldown: float = 0.2,
            cooldowns: int = 3, average: float = 0.25, log=print) -> dict:
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax import data
    from linscale_jax.train import loop as trainer
    from linscale_jax.study import cooldown as cool
    from linscale_jax.eval.val_loss import averaged_model
    from linscale_jax.study.compare import residual_sd

    t0 = time.time()
    study = study_preset(preset)
    val = sorted(int(v) for v in val)
    vmax = val[-1]
    eval_cfg = run_config(study, arch, size, steps, every, 0)  # one fixed sample for every run
    batches = data.eval_batches(eval_cfg, split="validation", num_batches=vmax)
    ck = list(range(every, steps + 1, every))
    late = ck[len(ck) // 2:]
    raw, avg, coo, cool_steps = [], [], [], []
    for s in range(seeds):
        cfg = run_config(study, arch, size, steps, every, s)
        wd = os.path.join(workdir, f"seed{s}")
        log(f"[noise] seed {s}: training {arch}-{size} for {steps} steps ({time.time() - t0:.0f}s)")
        trainer.train(cfg, wd)
        raw.append([batch_losses(ckpt.load_model(wd, c)[0], batches) for c in ck])
        avg.append([batch_losses(averaged_model(ckpt.load_model(wd, c)[0], wd, c, average)[0], batches)
                    for c in late])
        row = []
        for c in ck[-cooldowns:]:
            out = os.path.join(workdir, f"seed{s}-cool{c}")
            log(f"[noise] seed {s}: cooldown from step {c} ({time.time() - t0:.0f}s)")
            cool.cooldown(cfg, wd, c, cooldown, out, shape="linear")
            row.append(batch_losses(ckpt.load_model(out)[0], batches))
        coo.append(row)
        cool_steps = [c + cool.cooldown_steps(c, cooldown) for c in ck[-cooldowns:]]
    raw, avg, coo = np.array(raw), np.array(avg), np.array(coo)  # [seeds, k, vmax, 2]
    rows = []
    for kind, arr, st in (("raw", raw, ck), ("avg", avg, late), ("cool", coo, cool_steps)):
        for v in val:
            L = np.array([[loss_at(b, v) for b in run] for run in arr])  # [seeds, k]
            k0 = len(st) - len(late) if kind != "cool" else 0
            sd_ck, rise = residual_sd(np.log(np.array(st[k0:], float)), L[:, k0:]) if len(st[k0:]) >= 3 \
                else (float("nan"), float("nan"))
            rows.append(dict(estimator=f"{kind}@{v}", val_tokens=int(arr[0, -1, :v, 1].sum()),
                             final_step=int(st[-1]), final_loss=float(L[:, -1].mean()),
                             ckpt_sd=sd_ck, rise_share=rise,
                             seed_sd=float(np.std(L[:, -1], ddof=1)) if seeds > 1 else float("nan"),
                             sample_sd=float(np.mean([sample_sd(r[-1], v) for r in arr]))))
    out = dict(arch=arch, size=size, steps=steps, every=every, seeds=seeds, val=val, cooldown=cooldown,
               cooldowns=cooldowns, average=average, preset=preset, seconds=time.time() - t0, rows=rows)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, contract.NOISE_JSON), "w") as f:
        json.dump(out, f, indent=2)
    with open(os.path.join(workdir, contract.NOISE_MD), "w") as f:
        f.write(table_md(out) + "\n")
    return out


def table_md(out: dict) -> str:
    L = [f"{out['arch']}-{out['size']}, {out['steps']} steps at the preset's constant rate "
         f"({out['preset']}), {out['seeds']} seeds, checkpoint every {out['every']} steps; "
         f"late = second half of the checkpoints; avg = mean weights of the checkpoints in the last "
         f"{out['average']:.0%} of the steps (the study's val_loss_avg); "
         f"cool = linear cooldown over {out['cooldown']:.0%} more steps from each of the last "
         f"{out['cooldowns']} checkpoints. Measured in {out['seconds']:.0f} s.", "",
         "| estimator | val tokens | final loss | ckpt-to-ckpt sd | rising share | seed sd (final) | "
         "val-sample sd |", "|---|---|---|---|---|---|---|"]
    f = (lambda x, d=4: "—" if not np.isfinite(x) else f"{x:.{d}f}")  # noqa: E731
    for r in out["rows"]:
        L.append(f"| {r['estimator']} | {r['val_tokens']} | {f(r['final_loss'])} | {f(r['ckpt_sd'])} | "
                 f"{f(r['rise_share'], 2)} | {f(r['seed_sd'])} | {f(r['sample_sd'])} |")
    return "\n".join(L)


def main(argv=None) -> None:
    from linscale_jax.errors import ArgumentParser

    p = ArgumentParser(prog="python -m linscale_jax.study.noise", description=__doc__.split("\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--config", default="configs/study/cpu.py", help="study preset (its model/data/train)")
    p.add_argument("--arch", default=contract.BASELINE_ARCH)
    p.add_argument("--size", default="d16")
    p.add_argument("--steps", type=int, default=384)
    p.add_argument("--every", type=int, default=32)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--val", default="2,8,32", help="validation sample sizes in batches")
    p.add_argument("--cooldown", type=float, default=0.2, help="cooldown length / step")
    p.add_argument("--cooldowns", type=int, default=3, help="cool down from this many last checkpoints")
    p.add_argument("--average", type=float, default=0.25,
                   help="avg@v averages the checkpoints in this last fraction of the steps")
    a = p.parse_args(argv)
    out = measure(a.workdir, a.config, a.arch, a.size, a.steps, a.every, a.seeds,
                  [int(x) for x in a.val.split(",")], a.cooldown, a.cooldowns, a.average)
    print(table_md(out))


if __name__ == "__main__":
    main()
