"""The one delta-rule entry point (Gated DeltaNet's mixer; DeltaNet without a decay).

    delta_rule(q, k, v, beta, *, log_decay=None, segment_ids=None, initial_state=None,
               return_final_state=False, impl="auto", chunk_size=None)
    delta_rule_step(q, k, v, beta, state, *, log_decay=None)      one decode token

compute, for every batch row and head,
    S_t = exp(g_t) (I − β_t k_tᵀ k_t) r_t S_{t−1} + β_t k_tᵀ v_t,   o_t = q_t S_t
(S_0 = initial_state; g = log_decay, 0 when None; r_t = 0 where a new segment starts at t). q and
k are used as given: the mixer normalises and scales them (the update is a contraction for
‖k_t‖ = 1 and 0 ≤ β_t ≤ 2).

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim):
    q, k [b, t, h, k] float32 or bfloat16; v [b, t, h, v]; beta [b, t, h]
    log_decay      None (DeltaNet) | [b, t, h] per token and head (Gated DeltaNet), <= 0
    segment_ids    None | [b, t] int: a change of id between t-1 and t zeroes the state before
                   token t's update; t = 0 continues from initial_state
    initial_state  None (zeros) | [b, h, k, v] float32
Returns o [b, t, h, v] (q's dtype) and, with return_final_state=True, the final state
[b, h, k, v] float32. delta_rule_step: q, k [b, h, k], v [b, h, v], beta, log_decay [b, h], state
[b, h, k, v] -> (o [b, h, v] in q's dtype, new state float32); it is the reference scan's body.

impl: "reference" (token-by-token `lax.scan`), "xla" (chunked WY form), "pallas" (TPU kernels),
"auto" (pallas on TPU, xla elsewhere). chunk_size: None = the backend's default for the impl
(`delta_rule.config.default_chunk_size`).
"""

from __future__ import annotations

from kernels_pallas.delta_rule.checks import validate_inputs, validate_step
from kernels_pallas.delta_rule.reference import delta_rule_reference
from kernels_pallas.delta_rule.reference import delta_rule_step as _step
from kernels_pallas.linear_attention.api import resolve_impl, segment_starts


def delta_rule(
    q,
    k,
    v,
    beta,
    *,
    log_decay=None,
    segment_ids=None,
    initial_state=None,
    return_final_state=False,
    impl="auto",
    chunk_size=None,
):
    """See the module docstring. Returns o, or (o, final_state) when return_final_state."""
    validate_inputs(q, k, v, beta, log_decay, initial_state, segment_ids)
    impl = resolve_impl(impl, "delta_rule")
    starts = segment_starts(segment_ids)
    if impl == "reference":
        o, state = delta_rule_reference(q, k, v, beta, log_decay, initial_state, starts)
    elif impl == "xla":
        from kernels_pallas.delta_rule.config import default_chunk_size
        from kernels_pallas.delta_rule.xla import delta_rule_xla

        o, state = delta_rule_xla(q, k, v, beta, log_decay, initial_state, starts,
                                  chunk_size=default_chunk_size("xla", key_dim=q.shape[-1])
                                  if chunk_size is None else chunk_size)
    else:
        from kernels_pallas.delta_rule.pallas import delta_rule_pallas

        o, state = delta_rule_pallas(q, k, v, beta, log_decay, initial_state, starts,
                                     chunk_size=chunk_size)
    return (o, state) if return_final_state else o


def delta_rule_step(q, k, v, beta, state, *, log_decay=None):
    """One decode token (see the module docstring); equal to delta_rule(impl="reference") on a
    sequence of one token continued from `state`."""
    validate_step(q, k, v, beta, state, log_decay)
    o, state = _step(q, k, v, beta, state, log_decay)
    return o.astype(q.dtype), state
