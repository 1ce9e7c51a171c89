"""The one linear-attention entry point used by the TNL, HGRN2 and cosFormer2 mixers.

    linear_attention(q, k, v, *, log_decay=None, initial_state=None, return_final_state=False,
                     impl="auto", chunk_size=64)

computes, for every batch row and head,

    S_t = Diag(exp(log_decay_t)) S_{t-1} + k_tᵀ v_t,   o_t = q_t S_t      (S_0 = initial_state)

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim):
    q, k:          [b, t, h, k]      float32 or bfloat16
    v:             [b, t, h, v]
    log_decay:     None (no decay, cosFormer2)
                   [h]              per-head, data-independent (TNL)
                   [b, t, h, k]     per-token, per-key-channel, data-dependent (HGRN2)
                   values are log of the decay, in (-inf, 0]
    initial_state: [b, h, k, v] float32 or None (zeros)
Returns o [b, t, h, v] (dtype of q), and the final state [b, h, k, v] float32 when
return_final_state=True.

impl: "reference" (token-by-token `lax.scan`), "xla" (chunked parallel form), "pallas" (kernels),
"auto" (pallas on TPU, xla on GPU and CPU; the kernels are TPU-only for now).
"""

from __future__ import annotations



import jax
import jax.numpy as jnp

from kernels_pallas.linear_attention.checks import validate_inputs
from kernels_pallas.linear_attention.reference import linear_attention_reference

IMPLS = ("auto", "reference", "xla", "pallas")

# Log-decay written at the first token of a packed segment: exp(-60) ~ 1e-26 wipes the carried state,
# so a document never sees its predecessor. Callers build it with `segment_reset_log_decay`.
RESET_LOG_DECAY = -60.0


def segment_reset_log_decay(log_decay, segment_ids, num_heads, key_dim):
    """Fold document-boundary resets into the decay.

    log_decay: None | [h] | [b, t, h, k];  segment_ids: [b, t] int (a change of id starts a segment)
    Returns [b, t, h, k] float32: log_decay broadcast, with RESET_LOG_DECAY at each segment start
    (t = 0 included, where the state is the caller's initial state, so t = 0 is left alone).
    """
    b, t = segment_ids.shape
    starts = jnp.concatenate(
        [jnp.zeros((b, 1), bool), segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1
    )  # [b, t]
    if log_decay is None:
        base = jnp.zeros((b, t, num_heads, key_dim), jnp.float32)
    elif log_decay.ndim == 1:
        base = jnp.broadcast_to(
            log_decay.astype(jnp.float32)[None, None, :, None], (b, t, num_heads, key_dim)
        )
    else:
        base = log_decay.astype(jnp.float32)
    return jnp.where(starts[:, :, None, None], RESET_LOG_DECAY, base)


def _resolve_impl(impl: str) -> str:
    if impl not in IMPLS:
        raise ValueError(f"linear_attention: unknown impl={impl!r}; choose one of {IMPLS}.")
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
    initial_state=None,
    return_final_state=False,
    impl="auto",
    chunk_size=64,
):
    """See the module docstring. Returns o, or (o, final_state) when return_final_state."""
    validate_inputs(q, k, v, log_decay, initial_state)
    impl = _resolve_impl(impl)
    if impl == "reference":
        o, state = linear_attention_reference(q, k, v, log_decay, initial_state)
    elif impl == "xla":
        from kernels_pallas.linear_attention.xla import linear_attention_xla

        o, state = linear_attention_xla(q, k, v, log_decay, initial_state, chunk_size=chunk_size)
    else:
        from kernels_pallas.linear_attention.pallas import linear_attention_pallas

        o, state = linear_attention_pallas(q, k, v, log_decay, initial_state, chunk_size=chunk_size)
    return (o, state) if return_final_state else o
