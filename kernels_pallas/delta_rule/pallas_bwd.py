"""Backward Pallas kernel of the delta rule: one reverse sweep over the chunks (grid (b, h, n) or
(h, b, n), chunks in reverse order), the float32 gradient of the state carried in VMEM scratch.
Each step recomputes its chunk's terms from the inputs, the forward's T and its start state
(from pallas_fwd.states), then runs pallas_chunk.chunk_backward.

    backward(st, q, k, v, beta, g, tri, states, do, ds_final, seg)
        -> dq, dk [b, t, h*k], dv [b, t, h*v], dbeta, dg (None ungated) [b, h, t, 1], ds0
           [b, h, k, v], all float32
"""

from __future__ import annotations

import functools

from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels_pallas.delta_rule import cost as kc
from kernels_pallas.delta_rule import pallas_chunk as pc
from kernels_pallas.linear_attention.pallas_chunk import F32, call


def _reverse_kernel(st: pc.Static, *refs):
    g_ref, seg_ref, beta_ref, rest = pc.split_gates(st, refs)
    q_ref, k_ref, v_ref, tri_ref, do_ref, s_ref, ds_ref, *outs, ds_scr = rest
    dq_ref, dk_ref, dv_ref, dbeta_ref = outs[:4]
    dg_ref = outs[4] if st.gated else None
    ds0_ref = outs[-1]
    c = pl.program_id(2)

    @pl.when(c == 0)
    def _():
        ds_scr[...] = ds_ref[...]

    q, k, v, beta = q_ref[...], k_ref[...], v_ref[...], beta_ref[...].astype(F32)
    ch = pc.chunk_terms(st, q, k, v, beta, pc.chunk_decay(st, g_ref, seg_ref), tri=tri_ref[...])
    s = s_ref[...]
    w = pc.chunk_w(st, ch, s)
    dq, dk, dv, dbeta, dg, ds = pc.chunk_backward(st, ch, q, k, v, beta, s, w, do_ref[...],
                                                  ds_scr[...])
    dq_ref[...], dk_ref[...], dv_ref[...], dbeta_ref[...] = dq, dk, dv, dbeta
    if dg_ref is not None:
        dg_ref[...] = dg
    ds_scr[...] = ds

    @pl.when(c == pl.num_programs(2) - 1)
    def _():
        ds0_ref[...] = ds


def backward(st: pc.Static, q, k, v, beta, g, tri, states, do, ds_final, seg=None):
    """See the module docstring; shapes as in pallas_fwd.forward, tri [b, h, t, C] (the forward's
    T), do [b, t, h*v], states [b, h, n*k, v], ds_final [b, h, k, v] float32."""
    b, t, _ = q.shape
    h, dk, dv = st.num_heads, st.key_dim, st.value_dim
    rev = dict(reverse=True)
    args = ([] if g is None else [g]) + ([] if seg is None else [seg]) + [beta, q, k, v, tri,
                                                                            do, states, ds_final]
    col = ((b, h, t, 1), F32)
    outs = [((b, t, h * dk), F32), ((b, t, h * dk), F32), ((b, t, h * dv), F32), col] + \
        ([col] if st.gated else []) + [((b, h, dk, dv), F32)]
    out_specs = [pc.token_spec(st, dk, **rev), pc.token_spec(st, dk, **rev),
                 pc.token_spec(st, dv, **rev), pc.gate_spec(st, **rev)] + \
        ([pc.gate_spec(st, **rev)] if st.gated else []) + [pc.state_spec(st)]
    fn = call(functools.partial(_reverse_kernel, st), st, st.grid(b, t // st.chunk),
              pc.gate_specs(st, **rev) + [pc.token_spec(st, dk, **rev), pc.token_spec(st, dk, **rev),
                                          pc.token_spec(st, dv, **rev), pc.tri_spec(st, **rev),
                                          pc.token_spec(st, dv, **rev),
                                          pc.states_spec(st, **rev), pc.state_spec(st)],
              out_specs, outs, [pltpu.VMEM((dk, dv), F32)], sequential=True,
              cost=kc.estimate(st, "reverse", b, t, args, outs), prefix="delta_rule_")
    res = fn(*args)
    dq, dk_, dv_, dbeta = res[:4]
    dg = res[4] if st.gated else None
    return dq, dk_, dv_, dbeta, dg, res[-1]
