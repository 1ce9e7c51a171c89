"""Forward Pallas kernels of the delta rule: one chunk per grid step, the float32 state carried in
VMEM scratch from one chunk to the next (grid (b, h, n) or (h, b, n); batch and heads "parallel",
chunks "arbitrary").

    forward(st, q, k, v, beta, g, s0, seg, emit_tri=False)
        -> o [b, t, h*v], final state [b, h, k, v] (, every chunk's T [b, h, t, C]: emit_tri)
    states(st, k, v, beta, g, tri, s0, seg) -> chunk-start states [b, h, n*k, v] (the backward's)

Layout and the chunk math: pallas_chunk.
"""

from __future__ import annotations

import functools

from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels_pallas.delta_rule import cost as kc
from kernels_pallas.delta_rule import pallas_chunk as pc
from kernels_pallas.linear_attention.pallas_chunk import F32, call


def _forward_kernel(st: pc.Static, emit_tri: bool, *refs):
    g_ref, seg_ref, beta_ref, rest = pc.split_gates(st, refs)
    q_ref, k_ref, v_ref, s0_ref, o_ref, s_out_ref, *tri_ref, s_scr = rest
    c = pl.program_id(2)

    @pl.when(c == 0)
    def _():
        s_scr[...] = s0_ref[...]

    q, k = q_ref[...], k_ref[...]
    ch = pc.chunk_terms(st, q, k, v_ref[...], beta_ref[...].astype(F32),
                        pc.chunk_decay(st, g_ref, seg_ref))
    o, s_new = pc.chunk_step(st, ch, q, k, s_scr[...])
    o_ref[...] = o.astype(o_ref.dtype)
    if emit_tri:
        tri_ref[0][...] = ch.tri
    s_scr[...] = s_new

    @pl.when(c == pl.num_programs(2) - 1)
    def _():
        s_out_ref[...] = s_new


def _states_kernel(st: pc.Static, *refs):
    g_ref, seg_ref, beta_ref, rest = pc.split_gates(st, refs)
    k_ref, v_ref, tri_ref, s0_ref, states_ref, s_scr = rest

    @pl.when(pl.program_id(2) == 0)
    def _():
        s_scr[...] = s0_ref[...]

    k = k_ref[...]
    ch = pc.chunk_terms(st, None, k, v_ref[...], beta_ref[...].astype(F32),
                        pc.chunk_decay(st, g_ref, seg_ref, pairs=False), tri=tri_ref[...])
    s = s_scr[...]
    states_ref[...] = s
    s_scr[...] = pc.chunk_step(st, ch, None, k, s)[1]


def _gate_args(g, seg, beta):
    return ([] if g is None else [g]) + ([] if seg is None else [seg]) + [beta]


def forward(st: pc.Static, q, k, v, beta, g, s0, seg=None, emit_tri=False):
    """q, k [b, t, h*k]; v [b, t, h*v]; beta, g (None: ungated) [b, h, t, 1] float32; s0
    [b, h, k, v]; seg None | [b, t, 1]. Returns o (q.dtype) and the final state (float32), and
    with emit_tri every chunk's T [b, h, t, C] float32."""
    b, t, _ = q.shape
    dk, dv = st.key_dim, st.value_dim
    args = _gate_args(g, seg, beta) + [q, k, v, s0]
    out_shape = [((b, t, st.num_heads * dv), q.dtype), ((b, st.num_heads, dk, dv), F32)] + \
        ([((b, st.num_heads, t, st.chunk), F32)] if emit_tri else [])
    out_specs = [pc.token_spec(st, dv), pc.state_spec(st)] + \
        ([pc.tri_spec(st)] if emit_tri else [])
    fn = call(functools.partial(_forward_kernel, st, emit_tri), st, st.grid(b, t // st.chunk),
              pc.gate_specs(st) + [pc.token_spec(st, dk), pc.token_spec(st, dk),
                                   pc.token_spec(st, dv), pc.state_spec(st)],
              out_specs, out_shape, [pltpu.VMEM((dk, dv), F32)], sequential=True,
              cost=kc.estimate(st, "forward", b, t, args, out_shape), prefix="delta_rule_")
    return fn(*args)


def states(st: pc.Static, k, v, beta, g, tri, s0, seg=None):
    """The state before every chunk, [b, h, n*k, v] float32 (shapes as in `forward`; tri the
    forward's T)."""
    b, t, _ = k.shape
    dk, dv = st.key_dim, st.value_dim
    n = t // st.chunk
    args = _gate_args(g, seg, beta) + [k, v, tri, s0]
    out_shape = ((b, st.num_heads, n * dk, dv), F32)
    fn = call(functools.partial(_states_kernel, st), st, st.grid(b, n),
              pc.gate_specs(st) + [pc.token_spec(st, dk), pc.token_spec(st, dv),
                                   pc.tri_spec(st), pc.state_spec(st)],
              pc.states_spec(st), out_shape, [pltpu.VMEM((dk, dv), F32)], sequential=True,
              cost=kc.estimate(st, "states", b, t, args, [out_shape]), prefix="delta_rule_")
    return fn(*args)
