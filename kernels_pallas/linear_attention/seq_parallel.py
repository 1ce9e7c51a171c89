"""Sequence-parallel linear attention (LASP-style) over a 'seq' mesh axis with `jax.shard_map`.

The sequence is split into P contiguous shards along `axis_name`. Each shard

  1. runs the public `linear_attention` entry point (any impl) on its tokens from a zero state,
     returning its local outputs o_p and local final state S_p [b, h, k, v];
  2. all-gathers every shard's S_r and total log decay T_r = Σ_{t in shard r} log_decay_t [b, h, k];
  3. forms its carried-in state by the prefix combination (every exponent a sum of log decays <= 0)
         S_in(p) = Σ_{r<p} exp(Σ_{r<m<p} T_m) ⊙ S_r + exp(Σ_{m<p} T_m) ⊙ initial_state;
  4. corrects its outputs with it:  o_t += (q_t ⊙ exp(Σ_{shard start <= r <= t} log_decay_r)) S_in.

The global final state Σ_r exp(Σ_{m>r} T_m) ⊙ S_r + exp(Σ_m T_m) ⊙ initial_state is a psum of each
shard's own decayed state, so it is the same (replicated) on every seq shard. Communication: one
all-gather of P·b·h·k·(v + 1) floats and one psum of b·h·k·(v + 1); the backward pass is JAX
autodiff through `shard_map` (the all-gather transposes to a reduce-scatter). Batch and heads may be
sharded on other mesh axes at the same time (`batch_axis`, `head_axis`).

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim): as `linear_attention`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from kernels_pallas.linear_attention.api import linear_attention
from kernels_pallas.linear_attention.checks import validate_inputs

_F32 = jnp.float32


def linear_attention_seq_parallel(
    q,
    k,
    v,
    *,
    log_decay=None,
    initial_state=None,
    return_final_state=False,
    mesh,
    axis_name="seq",
    batch_axis="data",
    head_axis=None,
    impl="xla",
    chunk_size=64,
):
    """o [b, t, h, v] (q.dtype)[, final_state [b, h, k, v] fp32] for the sequence split over
    mesh axis `axis_name`. `batch_axis` shards b when it names a mesh axis (ignored otherwise);
    `head_axis` (optional) shards h. Same math as `linear_attention(..., impl=impl)`."""
    validate_inputs(q, k, v, log_decay, initial_state)
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    names = mesh.axis_names
    if axis_name not in names:
        raise ValueError(
            f"linear_attention_seq_parallel: mesh has axes {names}, no {axis_name!r}; build "
            f"the mesh with a {axis_name!r} axis or pass axis_name=<your sequence axis>."
        )
    n_seq = mesh.shape[axis_name]
    if t % n_seq:
        raise ValueError(
            f"linear_attention_seq_parallel: sequence length {t} is not divisible by the {n_seq} "
            f"shards of mesh axis {axis_name!r}; pad t to a multiple of {n_seq}."
        )
    bax = batch_axis if batch_axis in names else None
    if head_axis is not None and head_axis not in names:
        raise ValueError(
            f"linear_attention_seq_parallel: head_axis={head_axis!r} is not a mesh axis {names}; "
            f"pass head_axis=None or one of the mesh axes."
        )
    for ax, size, what in ((bax, b, "batch"), (head_axis, h, "heads")):
        if ax is not None and size % mesh.shape[ax]:
            raise ValueError(
                f"linear_attention_seq_parallel: {what} = {size} is not divisible by mesh axis "
                f"{ax!r} of size {mesh.shape[ax]}; change the mesh or the {what}."
            )

    kind = "none" if log_decay is None else ("head" if log_decay.ndim == 1 else "data")
    if initial_state is None:
        initial_state = jnp.zeros((b, h, dk, dv), _F32)
    seq_spec = P(bax, axis_name, head_axis, None)
    state_spec = P(bax, head_axis, None, None)
    decay_spec = {"none": P(), "head": P(head_axis), "data": seq_spec}[kind]
    decay_arg = jnp.zeros((), _F32) if log_decay is None else log_decay

    def shard(q, k, v, ld, s_init):
        ld = None if kind == "none" else ld
        # zero start state, varying over the mesh axes like q (scan carries in shard_map must)
        zero = jnp.zeros(s_init.shape, _F32) + jnp.zeros_like(q[:, 0, :, :, None], dtype=_F32)
        o, s_loc = linear_attention(
            q, k, v, log_decay=ld, initial_state=zero, return_final_state=True, impl=impl,
            chunk_size=chunk_size,
        )
        o_fix, s_fin = _carry_across_shards(q, ld, s_loc, s_init.astype(_F32), kind, axis_name)
        o = (o.astype(_F32) + o_fix).astype(q.dtype)
        return o, s_fin

    fn = jax.shard_map(
        shard,
        mesh=mesh,
        in_specs=(seq_spec, seq_spec, seq_spec, decay_spec, state_spec),
        out_specs=(seq_spec, state_spec),
    )
    o, final = fn(q, k, v, decay_arg, initial_state)
    return (o, final) if return_final_state else o


def _carry_across_shards(q, ld, s_loc, s_init, kind, axis_name):
    """Inside shard_map. q [b, t_loc, h, k]; ld None | [h] | [b, t_loc, h, k]; s_loc, s_init
    [b, h, k, v]. Returns (output correction [b, t_loc, h, v] fp32, global final state
    [b, h, k, v])."""
    b, t_loc, h, dk = q.shape
    n = jax.lax.psum(1, axis_name)
    p = jax.lax.axis_index(axis_name)
    states = jax.lax.all_gather(s_loc, axis_name)  # [n, b, h, k, v]
    shard_ids = jnp.arange(n)

    if kind == "none":
        q_read = q.astype(_F32)
        w_in = (shard_ids < p).astype(_F32)[:, None, None, None, None]  # [n, 1, 1, 1, 1]
        s_in = jnp.sum(w_in * states, axis=0) + s_init
        s_fin = jax.lax.psum(s_loc, axis_name) + s_init
    else:
        if kind == "head":
            g = ld.astype(_F32)  # [h]
            steps = jnp.arange(1, t_loc + 1, dtype=_F32)
            lcum = g[None, None, :, None] * steps[None, :, None, None]  # [1, t_loc, h, 1]
            tot = jnp.broadcast_to(g[None, :, None] * t_loc, (b, h, dk))
        else:
            lcum = jnp.cumsum(ld.astype(_F32), axis=1)  # [b, t_loc, h, k]
            tot = lcum[:, -1]  # [b, h, k]
        q_read = q.astype(_F32) * jnp.exp(lcum)
        tots = jax.lax.all_gather(tot, axis_name)  # [n, b, h, k]

        def range_sum(mask):  # mask [n(r), n(m)] -> Σ_m [mask] T_m  [n(r), b, h, k]
            return jnp.sum(jnp.where(mask[..., None, None, None], tots[None], 0.0), axis=1)

        r, m = shard_ids[:, None], shard_ids[None, :]
        before_p = (shard_ids < p)[:, None, None, None]
        # decay from the end of shard r to the start of shard p (r < p), and to the end (all r)
        w_in = jnp.where(before_p, jnp.exp(range_sum((m > r) & (m < p))), 0.0)
        init_in = jnp.exp(jnp.sum(jnp.where(before_p, tots, 0.0), axis=0))
        s_in = jnp.sum(w_in[..., None] * states, axis=0) + init_in[..., None] * s_init
        # final state: every shard adds its own state decayed to the sequence end (psum: invariant)
        w_own = jnp.exp(jnp.sum(jnp.where((shard_ids > p)[:, None, None, None], tots, 0.0), axis=0))
        init_fin = jnp.exp(jax.lax.psum(tot, axis_name))
        s_fin = jax.lax.psum(w_own[..., None] * s_loc, axis_name) + init_fin[..., None] * s_init
    o_fix = jnp.einsum("bthk,bhkv->bthv", q_read, s_in)
    return o_fix, s_fin
