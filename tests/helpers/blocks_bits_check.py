"""The trainer's blocks of steps against one dispatch per step, bit for bit, under XLA's own CPU code
generation (run without the test suite's cheap-compile XLA_FLAGS: the production programs).

    python -m helpers.blocks_bits_check ARCHS WORKDIR OUT

For each arch of the comma list ARCHS: the tiny config over 7 steps (a warmup of 3) through
trainer.train (blocks of 3, 2, 1 and 1 steps: logs every 3, a checkpoint at 5; the peak rate an
argument of the program), then the step compiled with the rate a constant of the program, alone on
the same batches, one dispatch per step; and a cooldown branch (study.cooldown: 4 steps of decaying rate in
blocks) against its formula applied step by step (params + f·(step(params) − params), one dispatch
each). Writes {arch: {"losses": [blocks, per step], "params_equal", "max_param_diff",
"cooldown_equal", "cooldown_moved"}} to OUT (JSON) for the test to judge.
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from helpers.train import tiny_config

from linscale_jax import data
from linscale_jax.models import ModelConfig
from linscale_jax.parallel import sharding
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.study.scaling import cooldown
from linscale_jax.train import loop as trainer
from linscale_jax.train import optim
from linscale_jax.train import programs
from linscale_jax.train.batches import GlobalBatches

STEPS = 7


def constant_rate_step(c, fns, mesh):
    """The train step with optim.lr a constant of the program, one dispatch per step:
    step(params, opt_state, rest, batch)."""
    parts = sharding.model_parts(ModelConfig.from_config(c.model), 0)
    tx = optim.make_optimizer(c.optim, int(c.train.steps), parts.param_axes, parts.abstract_params)
    step = jax.jit(programs._under_mesh(trainer.make_train_step(parts.graphdef, lambda _: tx, 1), mesh),
                   in_shardings=(fns.p_shard, fns.o_shard, fns.rep, fns.b_shard, None),
                   out_shardings=(fns.p_shard, fns.o_shard, fns.rep), donate_argnums=(0, 1))
    return lambda params, opt_state, rest, batch: step(params, opt_state, rest, batch, None)


def check(arch: str, workdir: str) -> dict:
    c = tiny_config(arch, steps=STEPS, log_every=3)
    c.checkpoint.every_steps = 5
    c.optim.warmup_steps = 3
    summary = trainer.train(c, workdir)
    fns, mesh = trainer.step_functions(c)
    step = constant_rate_step(c, fns, mesh)
    batches = GlobalBatches(data.train_rows(c), fns.b_shard)
    params, rest = fns.init_params(), fns.rest()
    opt_state = fns.init_opt(params)
    losses = []
    for s in range(STEPS):
        params, opt_state, m = step(params, opt_state, rest, batches(s))
        losses.append(float(m["loss"]))
    got, want = jax.device_get(summary["params"]), jax.device_get(params)
    diffs = [float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want))]
    cooled, moved = cooldown_equal(c, workdir, batches, fns, rest, step)
    return dict(losses=[[summary["losses"][s + 1] for s in range(STEPS)], losses],
                params_equal=equal(got, want), max_param_diff=max(diffs), cooldown_equal=cooled,
                cooldown_moved=moved)


def equal(a, b) -> bool:
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def cooldown_equal(c, workdir: str, batches, fns, rest, step) -> tuple[bool, float]:
    """The branch off checkpoint 5 (4 steps, 1-sqrt) against the per-step formula."""
    out = cooldown.cooldown(c, workdir, 5, 0.8, f"{workdir}-cool", shape="1-sqrt")
    src = ckpt.manager(workdir, read_only=True)
    try:
        r = ckpt.restore(src, workdir, fns.abs_params, fns.abs_opt, step=5)
    finally:
        src.close()
    params, opt_state, start = r["params"], r["opt_state"], jax.device_get(r["params"])
    scaled = jax.jit(lambda old, new, f: jax.tree.map(lambda o, n: o + f * (n - o), old, new))
    for j, f in enumerate(cooldown.lr_factors(4, "1-sqrt")):
        old = jax.tree.map(jnp.copy, params)  # the step donates its inputs
        new, opt_state, _ = step(params, opt_state, rest, batches(5 + j))
        params = scaled(old, new, jnp.float32(f))
    src = ckpt.manager(out, read_only=True)
    try:
        got = ckpt.restore(src, out, fns.abs_params, step=9)["params"]
    finally:
        src.close()
    moved = max(float(np.max(np.abs(a - b))) for a, b in
                zip(jax.tree.leaves(jax.device_get(got)), jax.tree.leaves(start)))
    return equal(jax.device_get(got), jax.device_get(params)), moved


def main(archs: str, workdir: str, out: str) -> None:
    result = {a: check(a, f"{workdir}/{a}") for a in archs.split(",")}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
