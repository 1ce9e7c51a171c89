"""Forward Pallas kernel: per chunk, intra-chunk masked matmul + inter-chunk state sweep.

Grid (b, h, n) or (h, b, n) (Static.grid_order): batch and heads "parallel", chunks "arbitrary"
(sequential), the fp32 state Sᵀ [v, k] carried in VMEM scratch from one chunk to the next. Layout,
decay factors and matmul precision: see pallas_chunk.
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
from kernels_pallas.linear_attention.pallas_chunk import F32, mm, mm_nt, mm_tn, mm_tn_split, scale
from kernels_pallas.linear_attention.pallas_chunk import scale_mask as masked


def data_intra(q, k, v, g, sub, same=None, dt=F32):
    """Intra-chunk output for a data-dependent decay, one [sub, v] block per sub-chunk of rows.
    q, k float32 (scaled elementwise), v in its input dtype; same: None | [C, C] 0/1 segment mask
    of the pairs; dt: matmul operand dtype."""
    sc = pc.SubChunks(g, sub)
    outs = []
    for blk in range(q.shape[0] // sub):
        i0 = blk * sub
        qi, ki = q[i0:i0 + sub], k[i0:i0 + sub]
        p_diag = jnp.sum(qi[:, None, :] * ki[None, :, :] * sc.diag(blk), axis=-1)  # [s, s]
        p_diag = masked(p_diag, None if same is None else same[i0:i0 + sub, i0:i0 + sub])
        o = mm(p_diag, v[i0:i0 + sub], dt)
        if blk:
            fq, fk = sc.off(blk)
            p_off = masked(mm_nt(qi * fq, k[:i0] * fk, dt),
                           None if same is None else same[i0:i0 + sub, :i0])
            o = o + mm(p_off, v[:i0], dt)
        outs.append(o)
    return outs


def _forward_kernel(st: pc.Static, *refs):
    a_ref, g_ref, seg_ref, rest = pc.split_decay_refs(st, refs)
    q_ref, k_ref, v_ref, s0_ref, o_ref, s_out_ref, s_scr = rest
    c = pl.program_id(2)

    @pl.when(c == 0)
    def _():
        s_scr[...] = s0_ref[...]

    dec = pc.chunk_decay(st, a_ref, g_ref)
    seg = pc.chunk_segments(seg_ref)
    dt = st.dt
    q_in, k_in, v = q_ref[...], k_ref[...], v_ref[...]  # input dtype: direct matmul operands
    q, k = q_in.astype(F32), k_in.astype(F32)  # scaled by decays / masks in float32
    s = s_scr[...]
    o_inter = mm_nt(masked(scale(q, dec.gq), seg.cont), s, dt)  # [C, v]
    if st.kind == DecayKind.DATA:
        for i, o in enumerate(data_intra(q, k, v, dec.g, st.sub, seg.same, dt)):
            rows = slice(i * st.sub, (i + 1) * st.sub)
            o_ref[rows, :] = (o + o_inter[rows]).astype(o_ref.dtype)
    else:
        d = masked(dec.d, seg.same)
        o_ref[...] = (mm(mm_nt(q_in, k_in, dt) * d, v, dt) + o_inter).astype(o_ref.dtype)
    k_end = pc.exact_or_scaled(k_in, k, dec.gk, seg.to_end)
    s_new = masked(scale(s, dec.gs), seg.alive) + mm_tn_split(v, k_end, dt)
    s_scr[...] = s_new

    @pl.when(c == pl.num_programs(2) - 1)
    def _():
        s_out_ref[...] = s_new


def forward(st: pc.Static, q, k, v, decay, s0, seg=None):
    """q, k: [b, t, h*k]; v: [b, t, h*v]; decay: None | a [h] | A [b, t, h*k]; s0: [b, h, v, k];
    seg: None | [b, t, 1] (pallas_chunk docstring).
    Returns o [b, t, h*v] (q.dtype) and the final state [b, h, v, k] float32."""
    b, t, _ = q.shape
    dk, dv = st.key_dim, st.value_dim
    grid = st.grid(b, t // st.chunk)
    in_specs = pc.decay_specs(st) + [
        pc.chunk_spec(st, dk), pc.chunk_spec(st, dk), pc.chunk_spec(st, dv), pc.state_spec(st)]
    out_specs = [pc.chunk_spec(st, dv), pc.state_spec(st)]
    out_shape = [((b, t, st.num_heads * dv), q.dtype),
                 ((b, st.num_heads, dv, dk), F32)]
    args = ([] if decay is None else [decay]) + ([] if seg is None else [seg]) + [q, k, v, s0]
    fn = pc.call(functools.partial(_forward_kernel, st), st, grid, in_specs, out_specs, out_shape,
                 [pltpu.VMEM((dv, dk), F32)], sequential=True,
                 cost=kc.estimate(st, "forward", b, t, args, out_shape))
    return fn(*args)
