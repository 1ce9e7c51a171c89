"""Backward Pallas kernels: a parallel intra-chunk part, a forward sweep (dq) and a reverse sweep
(dk, dv, d initial state). The chunk states are recomputed in the dq sweep, not stored.

    intra:   grid (b, h, n) all "parallel"    -> dq, dk, dv from pairs inside one chunk
    dq:      grid (b, h, n), chunks in order   -> dq_i += gq_i ⊙ (do_i S_inᵀ)       (S_in recomputed)
    reverse: grid (b, h, n), chunks reversed   -> dk_j += gk_j ⊙ (v_j dS_out), dv_j += (k_j ⊙ gk_j) dS_out,
                                                  dS_in = gS ⊙ dS_out + (q ⊙ gq)ᵀ do
All outputs float32; the wrapper sums the parts. Layout and matmul precision: see pallas_chunk.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels_pallas.linear_attention import cost as kc
from kernels_pallas.linear_attention import pallas_chunk as pc
from kernels_pallas.linear_attention.kind import DecayKind
from kernels_pallas.linear_attention.pallas_chunk import F32, mm_nt, mm_split, mm_tn, mm_tn_split, scale
from kernels_pallas.linear_attention.pallas_chunk import scale_mask as masked


def _data_intra_bwd(q, k, v, do, g, sub, dq_ref, dk_ref, dv_ref, same=None, dt=F32):
    """Intra-chunk gradients for a data-dependent decay, sub-chunk by sub-chunk of rows.
    q, k float32; v, do in their input dtype; same: None | [C, C] 0/1 segment mask of the pairs;
    dt: matmul operand dtype."""
    sc = pc.SubChunks(g, sub)
    dk_ref[...] = jnp.zeros(dk_ref.shape, F32)
    dv_ref[...] = jnp.zeros(dv_ref.shape, F32)
    for blk in range(q.shape[0] // sub):
        i0 = blk * sub
        rows = slice(i0, i0 + sub)
        qi, ki, doi = q[rows], k[rows], do[rows]
        e = sc.diag(blk)  # [s, s, k], zero above the diagonal
        if same is not None:
            e = e * same[rows, rows][:, :, None]
        p_diag = jnp.sum(qi[:, None, :] * ki[None, :, :] * e, axis=-1)
        dp_diag = mm_nt(doi, v[rows], dt)
        dqi = jnp.sum(dp_diag[:, :, None] * ki[None, :, :] * e, axis=1)
        dk_ref[rows, :] += jnp.sum(dp_diag[:, :, None] * qi[:, None, :] * e, axis=0)
        dv_ref[rows, :] += mm_tn(p_diag, doi, dt)
        if blk:
            fq, fk = sc.off(blk)
            qt, kt = qi * fq, k[:i0] * fk
            m_off = None if same is None else same[rows, :i0]
            dp_off = masked(mm_nt(doi, v[:i0], dt), m_off)  # [s, i0]
            dqi = dqi + fq * mm_split(dp_off, kt, dt)
            dk_ref[:i0, :] += fk * mm_tn_split(dp_off, qt, dt)
            dv_ref[:i0, :] += mm_tn(masked(mm_nt(qt, kt, dt), m_off), doi, dt)
        dq_ref[rows, :] = dqi


def _intra_kernel(st: pc.Static, *refs):
    a_ref, g_ref, seg_ref, rest = pc.split_decay_refs(st, refs)
    q_ref, k_ref, v_ref, do_ref, dq_ref, dk_ref, dv_ref = rest
    dec = pc.chunk_decay(st, a_ref, g_ref)
    seg = pc.chunk_segments(seg_ref)
    dt = st.dt
    q, k, v, do = (r[...] for r in (q_ref, k_ref, v_ref, do_ref))  # input dtype
    if st.kind == DecayKind.DATA:
        _data_intra_bwd(q.astype(F32), k.astype(F32), v, do, dec.g, st.sub, dq_ref, dk_ref,
                        dv_ref, seg.same, dt)
        return
    d = masked(dec.d, seg.same)
    p = mm_nt(q, k, dt) * d
    dp = mm_nt(do, v, dt) * d
    dq_ref[...] = mm_split(dp, k, dt)
    dk_ref[...] = mm_tn_split(dp, q, dt)
    dv_ref[...] = mm_tn(p, do, dt)


def _dq_kernel(st: pc.Static, *refs):
    a_ref, g_ref, seg_ref, rest = pc.split_decay_refs(st, refs)
    k_ref, v_ref, do_ref, s0_ref, dq_ref, s_scr = rest

    @pl.when(pl.program_id(2) == 0)
    def _():
        s_scr[...] = s0_ref[...]

    dec = pc.chunk_decay(st, a_ref, g_ref)
    seg = pc.chunk_segments(seg_ref)
    dt = st.dt
    v, do, k_in = v_ref[...], do_ref[...], k_ref[...]
    s = s_scr[...]
    dq_ref[...] = masked(scale(mm_split(do, s, dt), dec.gq), seg.cont)
    k_end = pc.exact_or_scaled(k_in, k_in.astype(F32), dec.gk, seg.to_end)
    s_scr[...] = masked(scale(s, dec.gs), seg.alive) + mm_tn_split(v, k_end, dt)


def _reverse_kernel(st: pc.Static, *refs):
    a_ref, g_ref, seg_ref, rest = pc.split_decay_refs(st, refs)
    q_ref, k_ref, v_ref, do_ref, ds_ref, dk_ref, dv_ref, ds0_ref, ds_scr = rest
    c = pl.program_id(2)

    @pl.when(c == 0)
    def _():
        ds_scr[...] = ds_ref[...]

    dec = pc.chunk_decay(st, a_ref, g_ref, reverse=True)
    seg = pc.chunk_segments(seg_ref)
    dt = st.dt
    q_in = q_ref[...]
    q, k = q_in.astype(F32), k_ref[...].astype(F32)
    v, do = v_ref[...], do_ref[...]
    ds = ds_scr[...]  # gradient w.r.t. the state after this chunk, [v, k]
    dk_ref[...] = masked(scale(mm_split(v, ds, dt), dec.gk), seg.to_end)
    dv_ref[...] = mm_nt(masked(scale(k, dec.gk), seg.to_end), ds, dt)
    q_start = pc.exact_or_scaled(q_in, q, dec.gq, seg.cont)
    ds_new = masked(scale(ds, dec.gs), seg.alive) + mm_tn_split(do, q_start, dt)
    ds_scr[...] = ds_new

    @pl.when(c == pl.num_programs(2) - 1)
    def _():
        ds0_ref[...] = ds_new


def backward(st: pc.Static, q, k, v, decay, s0, do, ds_final, seg=None):
    """Gradients (float32) of o and the final state w.r.t. q, k, v and the initial state.
    Shapes as in pallas_fwd.forward; do: [b, t, h*v]; ds_final: [b, h, v, k] float32."""
    b, t, _ = q.shape
    h, dk_, dv_ = st.num_heads, st.key_dim, st.value_dim
    grid = st.grid(b, t // st.chunk)
    dec_args = ([] if decay is None else [decay]) + ([] if seg is None else [seg])
    f32 = lambda width: ((b, t, h * width), F32)  # noqa: E731
    state = ((b, h, dv_, dk_), F32)
    kspec, vspec, sspec = pc.chunk_spec(st, dk_), pc.chunk_spec(st, dv_), pc.state_spec(st)

    args = [*dec_args, q, k, v, do]
    outs = [f32(dk_), f32(dk_), f32(dv_)]
    intra = pc.call(functools.partial(_intra_kernel, st), st, grid,
                    pc.decay_specs(st) + [kspec, kspec, vspec, vspec],
                    [kspec, kspec, vspec], outs, [], sequential=False,
                    cost=kc.estimate(st, "intra", b, t, args, outs))
    dq, dk, dv = intra(*args)

    args = [*dec_args, k, v, do, s0]
    dq_sweep = pc.call(functools.partial(_dq_kernel, st), st, grid,
                       pc.decay_specs(st) + [kspec, vspec, vspec, sspec],
                       kspec, f32(dk_), [pltpu.VMEM((dv_, dk_), F32)], sequential=True,
                       cost=kc.estimate(st, "dq", b, t, args, [f32(dk_)]))
    dq = dq + dq_sweep(*args)

    rk, rv = pc.chunk_spec(st, dk_, reverse=True), pc.chunk_spec(st, dv_, reverse=True)
    args, outs = [*dec_args, q, k, v, do, ds_final], [f32(dk_), f32(dv_), state]
    rev = pc.call(functools.partial(_reverse_kernel, st), st, grid,
                  pc.decay_specs(st, reverse=True) + [rk, rk, rv, rv, sspec],
                  [rk, rv, sspec], outs, [pltpu.VMEM((dv_, dk_), F32)],
                  sequential=True, cost=kc.estimate(st, "reverse", b, t, args, outs))
    dk_inter, dv_inter, ds0 = rev(*args)
    return dq, dk + dk_inter, dv + dv_inter, ds0
