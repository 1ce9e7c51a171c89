"""The one linear-attention entry point used by the TNL, HGRN2 and cosFormer2 mixers.

    linear_attention(q, k, v, *, log_decay=None, segment_ids=None, initial_state=None,
                     return_final_state=False, impl="auto", chunk_size=None)

computes, for every batch row and head, S_t = r_t Diag(exp(log_decay_t)) S_{t-1} + k_tᵀ v_t,
o_t = q_t S_t (S_0 = initial_state), with r_t = 0 where a new segment (document) starts at t.

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim):
    q, k [b, t, h, k] float32 or bfloat16; v [b, t, h, v]
    log_decay      None (cosFormer2) -> DecayKind.NONE; [h] per head (TNL) -> HEAD;
                   [b, t, h, k] per token and key channel (HGRN2) -> DATA; values in (-inf, 0]
    segment_ids    None | [b, t] int: a change of id between t-1 and t zeroes the state before
                   token t's update; t = 0 continues from initial_state. Handled beside each
                   decay kind: no [b, t, h, k] tensor is built for the none / head kinds.
    initial_state  None (zeros) | [b, h, k, v] float32
Returns o [b, t, h, v] (q's dtype) and, with return_final_state=True, the final state
[b, h, k, v] float32.

impl: "reference" (token-by-token `lax.scan`; also the decode step), "xla" (chunked parallel form),
"pallas" (kernels), "auto" (pallas on TPU, xla elsewhere). chunk_size: None = the backend's default
for the impl and k (`config.default_chunk_size`). Every impl may run inside `jax.shard_map` on local
shards; the sequence-parallel form is `seq_parallel.linear_attention_seq_shard`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels_pallas.linear_attention.checks import validate_inputs
from kernels_pallas.linear_attention.config import default_chunk_size
from kernels_pallas.linear_attention.kind import DecayKind
from kernels_pallas.linear_attention.reference import linear_attention_reference

IMPLS = ("auto", "reference", "xla", "pallas")


def segment_starts(segment_ids):
    """[b, t] int ids -> [b, t] bool, True where a segment starts (never at t = 0), or None."""
    if segment_ids is None:
        return None
    first = jnp.zeros_like(segment_ids[:, :1], dtype=bool)
    return jnp.concatenate([first, segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)


def resolve_impl(impl: str, op: str = "linear_attention") -> str:
    """impl checked against IMPLS ("auto" resolved for this backend); op names the entry point."""
    if impl not in IMPLS:
        raise ValueError(f"{op}: unknown impl={impl!r}; choose one of {IMPLS}.")
    if impl == "auto":
        # The Pallas kernels target TPU (Mosaic); GPU and CPU use the chunked XLA form.
        return "pallas" if jax.default_backend() == "tpu" else "xla"
    return impl


def linear_attention(
    q,
    k,
    v,
    *,
    log_decay=None,
    segment_ids=None,
    initial_state=None,
    return_final_state=False,
    impl="auto",
    chunk_size=None,
):
    """See the module docstring. Returns o, or (o, final_state) when return_final_state."""
    validate_inputs(q, k, v, log_decay, initial_state, segment_ids)
    impl = resolve_impl(impl)
    kind = DecayKind.of(log_decay)
    starts = segment_starts(segment_ids)
    if chunk_size is None:
        chunk_size = default_chunk_size(impl, key_dim=q.shape[-1])
    if impl == "reference":
        o, state = linear_attention_reference(q, k, v, log_decay, initial_state, starts, kind=kind)
    elif impl == "xla":
        from kernels_pallas.linear_attention.xla import linear_attention_xla

        o, state = linear_attention_xla(q, k, v, log_decay, initial_state, starts, kind=kind,
                                        chunk_size=chunk_size)
    else:
        from kernels_pallas.linear_attention.pallas import linear_attention_pallas

        o, state = linear_attention_pallas(q, k, v, log_decay, initial_state, starts, kind=kind,
                                           chunk_size=chunk_size)
    return (o, state) if return_final_state else o
