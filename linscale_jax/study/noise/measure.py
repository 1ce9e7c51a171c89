"""Measure the noise sources of a study's loss points on one small size (the steps of the "noise"
kind, study.experiments).

    python -m linscale_jax.study --config=noise --workdir=DIR [--config.preset=cpu] [--config.arch=llama]
        [--config.size=d16] [--config.steps=384] [--config.every=32] [--config.seeds=3]
        [--config.val=2,8,32] [--config.cooldown=0.2] [--config.cooldowns=3] [--config.average=0.25]

Trains `seeds` runs of one size with the base preset's (study.preset) constant learning rate (run i:
train.seed = data.seed = i, so initialisation and data order both change), a checkpoint every
`every` steps: DIR/runs/<arch>-<size>-seed<i>/. Every checkpoint is evaluated on the largest
validation sample (max of `val`, batches of the preset's batch × seq_len tokens, one fixed sample
for all runs), batch by batch, so that the loss on the first v batches gives each smaller sample size
for free (each run's <run>/noise_losses.npz). Measured, per estimator of a checkpoint's loss:

  raw@v      the checkpoint's weights on the first v validation batches
  avg@v      the mean weights of the checkpoints in the last `average` fraction of the steps so
             far (eval.val_loss.averaged_model: the study's val_loss_avg, an offline EMA)
  cool@v     a cooldown branch (scaling.cooldown: linear decay to 0 over `cooldown` ×
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

from linscale_jax.study import files



def run_config(study, arch: str, size: str, steps: int, every: int, seed: int):
    from linscale_jax.study.scaling import plan

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


def _sizes(study) -> list[int]:
    from linscale_jax.contract import split_list

    return sorted(int(v) for v in split_list(study.val, "study.val"))


def _checkpoints(study) -> tuple[list[int], list[int]]:
    """(every checkpoint step, the late ones: the second half)."""
    ck = list(range(int(study.every), int(study.steps) + 1, int(study.every)))
    return ck, ck[len(ck) // 2:]


def plan(study, workdir: str) -> list:
    """One run per seed (scaling.plan.Run, DIR/runs/<arch>-<size>-seed<i>)."""
    from linscale_jax.study.presets import preset
    from linscale_jax.study.scaling import plan as plan_lib

    base, arch, size = preset(str(study.preset)), str(study.arch), str(study.size)
    return [plan_lib.make_run(base, run_config(base, arch, size, study.steps, study.every, s), arch, size, s,
                              workdir, index=s) for s in range(int(study.seeds))]


def _losses_path(run) -> str:
    return os.path.join(run.workdir, files.NOISE_LOSSES)


def finished(study, run) -> bool:
    return os.path.exists(_losses_path(run))


def process_run(study, run, log=print, final: bool = False) -> None:
    """Train one seed, then every checkpoint's per-batch validation losses (raw, averaged, cooled
    down) into <run>/noise_losses.npz."""
    from linscale_jax import data
    from linscale_jax.eval.val_loss import averaged_model
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.study.presets import preset
    from linscale_jax.study.scaling import cooldown as cool
    from linscale_jax.train import loop as trainer

    t0, base = time.time(), preset(str(study.preset))
    eval_cfg = run_config(base, str(study.arch), str(study.size), study.steps, study.every, 0)  # one sample for all
    batches = data.eval_batches(eval_cfg, split="validation", num_batches=_sizes(study)[-1])
    ck, late = _checkpoints(study)
    wd, cfg = run.workdir, run.config
    log(f"[noise] {run.name}: training {study.steps} steps")
    trainer.train(cfg, wd)
    raw = [batch_losses(ckpt.load_model(wd, c)[0], batches) for c in ck]
    avg = [batch_losses(averaged_model(ckpt.load_model(wd, c)[0], wd, c, float(study.average))[0], batches)
           for c in late]
    cooled = []
    for c in ck[-int(study.cooldowns):]:
        out = os.path.join(wd, files.COOLDOWNS, str(c))
        log(f"[noise] {run.name}: cooldown from step {c} ({time.time() - t0:.0f}s)")
        cool.cooldown(cfg, wd, c, float(study.cooldown), out, shape="linear")
        cooled.append(batch_losses(ckpt.load_model(out)[0], batches))
    np.savez(_losses_path(run) + ".tmp.npz", raw=np.array(raw), avg=np.array(avg), cool=np.array(cooled))
    os.replace(_losses_path(run) + ".tmp.npz", _losses_path(run))


def join(study, runs, workdir: str, ctx) -> dict:
    """The statistics of every estimator from the runs' losses: DIR/noise.json."""
    from linscale_jax.study.scaling import cooldown as cool
    from linscale_jax.study.scaling.compare import residual_sd

    have = [r for r in runs if finished(study, r)]
    if not have:
        raise FileNotFoundError(f"no finished noise runs under {workdir}/runs; train them first")
    got = [np.load(_losses_path(r)) for r in have]
    raw, avg, coo = (np.array([g[k] for g in got]) for k in ("raw", "avg", "cool"))  # [seeds, k, vmax, 2]
    ck, late = _checkpoints(study)
    cool_steps = [c + cool.cooldown_steps(c, float(study.cooldown)) for c in ck[-int(study.cooldowns):]]
    seeds, rows = len(have), []
    for kind, arr, st in (("raw", raw, ck), ("avg", avg, late), ("cool", coo, cool_steps)):
        for v in _sizes(study):
            L = np.array([[loss_at(b, v) for b in run] for run in arr])  # [seeds, k]
            k0 = len(st) - len(late) if kind != "cool" else 0
            sd_ck, rise = residual_sd(np.log(np.array(st[k0:], float)), L[:, k0:]) if len(st[k0:]) >= 3 \
                else (float("nan"), float("nan"))
            rows.append(dict(estimator=f"{kind}@{v}", val_tokens=int(arr[0, -1, :v, 1].sum()),
                             final_step=int(st[-1]), final_loss=float(L[:, -1].mean()),
                             ckpt_sd=sd_ck, rise_share=rise,
                             seed_sd=float(np.std(L[:, -1], ddof=1)) if seeds > 1 else float("nan"),
                             sample_sd=float(np.mean([sample_sd(r[-1], v) for r in arr]))))
    out = dict(arch=str(study.arch), size=str(study.size), steps=int(study.steps), every=int(study.every),
               seeds=seeds, val=_sizes(study), cooldown=float(study.cooldown), cooldowns=int(study.cooldowns),
               average=float(study.average), preset=str(study.preset), seconds=ctx.runs_s or 0.0, rows=rows)
    with open(os.path.join(workdir, files.NOISE_JSON), "w") as f:
        json.dump(out, f, indent=2)
    return out


def report(study, workdir: str, joined: dict, ctx) -> str:
    """DIR/noise.md: the table."""
    path = os.path.join(workdir, files.NOISE_MD)
    text = table_md(joined)
    with open(path, "w") as f:
        f.write(text + "\n")
    ctx.log(text)
    return path


def table_md(out: dict) -> str:
    L = [f"{out['arch']}-{out['size']}, {out['steps']} steps at the preset's constant rate "
         f"({out['preset']}), {out['seeds']} seeds, checkpoint every {out['every']} steps; "
         f"late = second half of the checkpoints; avg = mean weights of the checkpoints in the last "
         f"{out['average']:.0%} of the steps (the study's val_loss_avg); "
         f"cool = linear cooldown over {out['cooldown']:.0%} more steps from each of the last "
         f"{out['cooldowns']} checkpoints. Runs took {out['seconds']:.0f} s.", "",
         "| estimator | val tokens | final loss | ckpt-to-ckpt sd | rising share | seed sd (final) | "
         "val-sample sd |", "|---|---|---|---|---|---|---|"]
    f = (lambda x, d=4: "—" if not np.isfinite(x) else f"{x:.{d}f}")  # noqa: E731
    for r in out["rows"]:
        L.append(f"| {r['estimator']} | {r['val_tokens']} | {f(r['final_loss'])} | {f(r['ckpt_sd'])} | "
                 f"{f(r['rise_share'], 2)} | {f(r['seed_sd'])} | {f(r['sample_sd'])} |")
    return "\n".join(L)
