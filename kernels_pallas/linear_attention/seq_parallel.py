"""Sequence-parallel linear attention (LASP-style) over a 'seq' mesh axis with `jax.shard_map`.

    linear_attention_seq_shard(q, k, v, *, log_decay=None, segment_ids=None, initial_state=None,
                               return_final_state=False, axis_name="seq", impl="auto",
                               chunk_size=None)
        The per-shard function: call it INSIDE an existing `jax.shard_map` whose mesh has the
        named sequence axis `axis_name` splitting t into contiguous blocks in order of
        `axis_index`. Every array is the local shard (batch / heads may be sharded over other mesh
        axes at the same time):
            q, k [b_loc, t_loc, h_loc, k]; v [b_loc, t_loc, h_loc, v];
            log_decay None | [h_loc] | [b_loc, t_loc, h_loc, k]; segment_ids None | [b_loc, t_loc]
            (the local slice of the global ids); initial_state None | [b_loc, h_loc, k, v] (the
            state before global t = 0, the same on every seq shard).
        Returns o [b_loc, t_loc, h_loc, v] (q.dtype) [, the GLOBAL final state [b_loc, h_loc, k, v]
        fp32, identical on every seq shard].

    linear_attention_seq_parallel(q, k, v, *, ..., mesh, axis_name="seq", batch_axis="data",
                                  head_axis=None, ...)
        The same on whole arrays: builds the shard_map itself.

Each shard runs `linear_attention` from a zero state, then one all-gather of the shards' states and
total decays gives its carried-in state and corrects its outputs before the first segment start;
the backward pass is JAX autodiff. Algorithm and communication: docs/models.md, "Sequence
parallelism (LASP)".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from kernels_pallas.linear_attention.api import linear_attention, segment_starts
from kernels_pallas.linear_attention.checks import validate_inputs
from kernels_pallas.linear_attention.kind import DecayKind

_F32 = jnp.float32


def linear_attention_seq_shard(
    q,
    k,
    v,
    *,
    log_decay=None,
    segment_ids=None,
    initial_state=None,
    return_final_state=False,
    axis_name="seq",
    impl="auto",
    chunk_size=None,
):
    """Per-shard LASP form; call inside jax.shard_map (see the module docstring for shapes)."""
    validate_inputs(q, k, v, log_decay, initial_state, segment_ids)
    b, t_loc, h, dk = q.shape
    dv = v.shape[-1]
    kind = DecayKind.of(log_decay)
    # zero start state, varying over the mesh axes like q (scan carries in shard_map must)
    zero = jnp.zeros((b, h, dk, dv), _F32) + jnp.zeros_like(q[:, 0, :, :, None], dtype=_F32)
    o, s_loc = linear_attention(
        q, k, v, log_decay=log_decay, segment_ids=segment_ids, initial_state=zero,
        return_final_state=True, impl=impl, chunk_size=chunk_size,
    )
    s_init = zero if initial_state is None else initial_state.astype(_F32)
    reads = None
    if segment_ids is not None:
        n = jax.lax.axis_size(axis_name)
        p = jax.lax.axis_index(axis_name)
        prev_last = jax.lax.ppermute(segment_ids[:, -1], axis_name,
                                     [(i, i + 1) for i in range(n - 1)])
        starts = segment_starts(segment_ids)
        first = (p > 0) & (prev_last != segment_ids[:, 0])
        starts = starts.at[:, 0].set(first)
        reads = jnp.cumsum(starts.astype(jnp.int32), axis=1) == 0  # [b, t_loc]
    o_fix, s_fin = _carry_across_shards(q, log_decay, reads, s_loc, s_init, kind, axis_name)
    o = (o.astype(_F32) + o_fix).astype(q.dtype)
    return (o, s_fin) if return_final_state else o


def linear_attention_seq_parallel(
    q,
    k,
    v,
    *,
    log_decay=None,
    segment_ids=None,
    initial_state=None,
    return_final_state=False,
    mesh,
    axis_name="seq",
    batch_axis="data",
    head_axis=None,
    impl="auto",
    chunk_size=None,
):
    """o [b, t, h, v] (q.dtype)[, final_state [b, h, k, v] fp32] for the sequence split over
    mesh axis `axis_name`. `batch_axis` shards b when it names a mesh axis (ignored otherwise);
    `head_axis` (optional) shards h. Same math as `linear_attention(..., impl=impl)`."""
    validate_inputs(q, k, v, log_decay, initial_state, segment_ids)
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

    kind = DecayKind.of(log_decay)
    if initial_state is None:
        initial_state = jnp.zeros((b, h, dk, dv), _F32)
    seq_spec = P(bax, axis_name, head_axis, None)
    state_spec = P(bax, head_axis, None, None)
    decay_spec = kind.pick(P(), P(head_axis), seq_spec)
    decay_arg = jnp.zeros((), _F32) if log_decay is None else log_decay
    ids_spec = P(bax, axis_name)
    ids_arg = jnp.zeros((b, t), jnp.int32) if segment_ids is None else segment_ids

    def shard(q, k, v, ld, ids, s_init):
        return linear_attention_seq_shard(
            q, k, v, log_decay=None if kind == DecayKind.NONE else ld,
            segment_ids=None if segment_ids is None else ids, initial_state=s_init,
            return_final_state=True, axis_name=axis_name, impl=impl, chunk_size=chunk_size)

    fn = jax.shard_map(
        shard,
        mesh=mesh,
        in_specs=(seq_spec, seq_spec, seq_spec, decay_spec, ids_spec, state_spec),
        out_specs=(seq_spec, state_spec),
    )
    o, final = fn(q, k, v, decay_arg, ids_arg, initial_state)
    return (o, final) if return_final_state else o


def _carry_across_shards(q, ld, reads, s_loc, s_init, kind, axis_name):
    """Inside shard_map. q [b, t_loc, h, k]; ld None | [h] | [b, t_loc, h, k]; reads None |
    [b, t_loc] bool (no segment start in the shard up to t); s_loc, s_init [b, h, k, v].
    Returns (output correction [b, t_loc, h, v] fp32, global final state [b, h, k, v])."""
    b, t_loc, h, dk = q.shape
    n = jax.lax.axis_size(axis_name)
    p = jax.lax.axis_index(axis_name)
    shard_ids = jnp.arange(n)

    e = kind.expand(ld)  # None | [1, 1, h, 1] | [b, t_loc, h, k]
    if e is None:
        lcum, tot = None, jnp.zeros((b, h, 1), _F32)
    else:  # log decay summed from the shard start: [1 | b, t_loc, h, 1 | k]
        per_step = jnp.broadcast_to(e.astype(_F32), (e.shape[0], t_loc, h, e.shape[-1]))
        lcum = jnp.cumsum(per_step, axis=1)
        tot = jnp.broadcast_to(lcum[:, -1], (b, h, e.shape[-1]))  # [b, h, 1 | k]
    q_read = q.astype(_F32) if lcum is None else q.astype(_F32) * jnp.exp(lcum)
    if reads is not None:
        q_read = q_read * reads[:, :, None, None].astype(_F32)
    # a shard with a segment start blocks every state from before it ([b], as [b, 1, 1])
    dead = jnp.zeros((b, 1, 1), _F32) if reads is None else (~reads[:, -1]).astype(_F32)[:, None, None]
    states = jax.lax.all_gather(s_loc, axis_name)  # [n, b, h, k, v]
    tots = jax.lax.all_gather(tot + jnp.zeros_like(s_loc[..., 0, :1]), axis_name)  # [n, b, h, kk]
    deads = jax.lax.all_gather(dead + jnp.zeros_like(tot[..., :1]), axis_name)  # [n, b, h, 1]

    def range_sum(x, mask):  # mask [n(r), n(m)] -> Σ_m [mask] x_m  [n(r), b, h, *]
        return jnp.sum(jnp.where(mask[..., None, None, None], x[None], 0.0), axis=1)

    def weight(mask):  # exp(Σ_m T_m) if no shard m in the mask is dead, else 0: [n(r), b, h, kk]
        return jnp.where(range_sum(deads, mask) > 0, 0.0, jnp.exp(range_sum(tots, mask)))

    r, m = shard_ids[:, None], shard_ids[None, :]
    before_p = (shard_ids < p)[:, None, None, None]
    # from the end of shard r to the start of shard p (r < p); from before t = 0 (row "r = -1")
    w_in = jnp.where(before_p, weight((m > r) & (m < p)), 0.0)
    init_in = weight(m < p)[0]
    s_in = jnp.sum(w_in[..., None] * states, axis=0) + init_in[..., None] * s_init
    # final state: every shard adds its own state decayed to the sequence end (psum: invariant)
    w_own = weight(m > p)[0]
    alive_all = jax.lax.psum(dead, axis_name) == 0  # [b, 1, 1]
    init_fin = jnp.where(alive_all, jnp.exp(jax.lax.psum(tot, axis_name)), 0.0)
    s_fin = jax.lax.psum(w_own[..., None] * s_loc, axis_name) + init_fin[..., None] * s_init
    o_fix = jnp.einsum("bthk,bhkv->bthv", q_read, s_in)
    return o_fix, s_fin
