"""Several train steps per dispatch: the step loop runs blocks of up to k steps as one program.

    k = block_steps(config)                                # the most steps one dispatch runs
    plan = block_plan(start, total, k, ends)               # [(first step, steps)], blocks in order
    block = make_block_step(train_step)
    params, opt_state, m = block(params, opt_state, rest, batches, n, scale, scaled, lr)

A block is a `lax.fori_loop` over its n <= k steps (n is an argument: one program serves every
block length), each step the run's own train step on batch i of `batches` ([k, b, t] per key;
rows i >= n are not read). The metrics of every step stay on the devices as [k] arrays (loss,
grad_norm, params_finite; entries i >= n are 0) until the step loop fetches them at a log,
eval or checkpoint step, which always ends a block (`block_plan`'s `ends`). The step inside the
loop is the same computation as the step alone: the parameters are bit-identical to one dispatch
per step, the losses equal to within 2 ulp (XLA may sum a step's loss in another order inside the
loop; tests/train/test_blocks.py).

`scale` [k] float32 and `scaled` [k] bool serve branches that take a step at a fraction of the
rate (study.cooldown): where scaled[i], the step's parameters become old + scale[i]·(new − old),
AdamW's step at rate scale[i]·lr (its update is linear in the rate and its moments do not depend
on it); elsewhere they are the step's own (training passes scaled all False: the select costs a
predicate per step and leaves the arithmetic untouched).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from linscale_jax.train.batches import BYTES_PER_TOKEN

MAX_STEPS = 32  # steps per dispatch at most: a log interval longer than this is split
MAX_BYTES = 64 << 20  # a block's batches on the devices: at most this many bytes (big batches: fewer steps)


def block_steps(config) -> int:
    """The most steps one dispatch runs: the log interval, capped by MAX_STEPS and by the bytes of
    the block's batches (MAX_BYTES); at least 1."""
    tr = config.train
    per_step = int(tr.batch_size) * int(tr.seq_len) * BYTES_PER_TOKEN
    return int(max(1, min(max(int(tr.log_every), 1), MAX_STEPS, MAX_BYTES // max(per_step, 1))))


def block_plan(start: int, total: int, k: int, ends) -> list[tuple[int, int]]:
    """Blocks (first step index, number of steps) covering steps start+1 .. total: each of at most
    `k` steps, ending at every step of `ends` (a set of step numbers: logs, evals, checkpoints,
    profile edges) and at `total`. Step s means "after s updates": a block (i, n) runs the updates
    i+1 .. i+n, consuming the batches of steps i .. i+n-1."""
    stops = sorted(s for s in set(ends) | {total} if start < s <= total)
    plan, step = [], start
    for stop in stops:
        while step < stop:
            n = min(k, stop - step)
            plan.append((step, n))
            step += n
    return plan


def every(period: int, start: int, total: int) -> set[int]:
    """The multiples of `period` in (start, total] (none for period <= 0)."""
    if period <= 0:
        return set()
    return set(range((start // period + 1) * period, total + 1, period))


def make_block_step(train_step):
    """block(params, opt_state, rest, batches, n, scale, scaled, lr) -> (params, opt_state, metrics):
    train_step(params, opt_state, rest, batch, lr) -> (params, opt_state, {loss, grad_norm,
    params_finite}) run n times (0 < n <= k) on batches[i] ([k, b, t] per key; k is the block's
    static size, one compilation per k), the metrics as [k] arrays (see module docstring)."""

    def block(params, opt_state, rest, batches, n, scale, scaled, lr):
        k = jax.tree.leaves(batches)[0].shape[0]

        def body(i, carry):
            p, o, loss, norm, finite = carry
            batch = jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i, keepdims=False), batches)
            new, o, m = train_step(p, o, rest, batch, lr)
            f = scale[i]
            new = jax.lax.cond(scaled[i],
                               lambda: jax.tree.map(lambda a, b: a + f * (b - a), p, new),
                               lambda: new)
            return (new, o, loss.at[i].set(m["loss"]), norm.at[i].set(m["grad_norm"]),
                    finite.at[i].set(m["params_finite"]))

        zeros = jnp.zeros((k,), jnp.float32)
        carry = (params, opt_state, zeros, zeros, jnp.zeros((k,), bool))
        params, opt_state, loss, norm, finite = jax.lax.fori_loop(0, n, body, carry)
        return params, opt_state, dict(loss=loss, grad_norm=norm, params_finite=finite)

    return block


def unscaled(k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scale, scaled) of a training block: every step at the schedule's own rate."""
    return np.ones((k,), np.float32), np.zeros((k,), bool)
