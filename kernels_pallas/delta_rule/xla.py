"""Chunked delta rule in plain XLA (`impl="xla"`): the WY / UT-transform form (Yang et al. 2024,
arXiv 2406.06484; with the gate: Yang, Kautz & Hatamizadeh, arXiv 2412.06464).

    delta_rule_xla(q, k, v, beta, log_decay=None, initial_state=None, starts=None, *,
                   chunk_size=64) -> (o, final_state)

Computes exactly what `reference.py` computes, c tokens at a time. Inside a chunk, with
γ_i = Σ_{r<=i} g_r (from the chunk start), Γ_ij = exp(Σ_{j<r<=i} g_r) (j <= i) and the chunk-start
state S_0, the state after token i is S_i = e^{γ_i} S_0 + Σ_{j<=i} Γ_ij k_jᵀ w_j with
w_j = β_j (v_j − k_j e^{g_j} S_{j−1}); stacking the w_j gives the triangular system
(I + L) W = diag(β) V − diag(β e^γ) K S_0, L_ij = β_i Γ_ij k_i·k_j (j < i), so with
T = (I + L)^{-1} (the UT transform, `wy.unit_lower_inverse`)

    U = T diag(β) V,  Wk = T diag(β e^γ) K          (parallel over chunks)
    W = U − Wk S_0                                   (the scan over chunks)
    O = diag(e^γ) Q S_0 + (Q Kᵀ ⊙ Γ) W,   S_c = e^{γ_c} S_0 + (diag(e^{γ_c − γ}) K)ᵀ W

Every exponent is a log-decay sum over a contiguous range (<= 0), formed as a direct sum
(`wy.range_sums`, a 0/1 mask times the log decays; cumulative sums from the chunk start or to its
end), never a difference of prefix sums. Segments are masks beside it: pairs interact inside one segment, rows before the
chunk's first start read S_0, keys of the chunk's last segment reach S_c, S_0 crosses a chunk
without a start. t is padded to a multiple of the chunk with zeros (β = 0 writes nothing, g = 0
keeps the state). All work is float32; o has q's dtype. Gradients: JAX autodiff, with the
inverse's exact VJP. Derivation: docs/models.md, "The delta rule".

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim; inside: n chunks, c chunk):
    q, k [b, t, h, k]; v [b, t, h, v]; beta, log_decay [b, t, h]; state [b, h, k, v];
    starts None | [b, t] bool.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from kernels_pallas.delta_rule.config import xla_block_len
from kernels_pallas.delta_rule.wy import range_sums, unit_lower_inverse
from kernels_pallas.linear_attention.xla import _sum_after

_F32 = jnp.float32


def delta_rule_xla(q, k, v, beta, log_decay=None, initial_state=None, starts=None, *,
                   chunk_size=64, block_len="auto"):
    """Returns (o [b, t, h, v] in q.dtype, final_state [b, h, k, v] float32); see the module doc.
    block_len: tokens per step of an outer sequential sweep over blocks ("auto":
    config.xla_block_len for this backend; None: one block), which keeps one step's [n, c, c]
    arrays in cache so the time grows linearly with t; the last t mod block_len tokens are one more
    (static) call."""
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"delta_rule_xla: chunk_size must be a positive int; got {chunk_size!r}.")
    if block_len == "auto":
        block_len = xla_block_len(int(chunk_size))
    t = q.shape[1]
    if block_len is None or t < 2 * block_len:
        return _chunked(q, k, v, beta, log_decay, initial_state, starts, int(chunk_size))
    nb, tail = divmod(t, block_len)
    main = nb * block_len

    def blocks(x):  # [b, t, ...] -> [nb, b, block_len, ...] (the first nb * block_len tokens)
        if x is None:
            return None
        x = x[:, :main]
        return jnp.moveaxis(x.reshape(x.shape[0], nb, block_len, *x.shape[2:]), 1, 0)

    b, _, h, dk = q.shape
    state = jnp.zeros((b, h, dk, v.shape[-1]), _F32) if initial_state is None else initial_state
    state = state.astype(_F32) + jnp.zeros_like(q[:, 0, :, :, None], dtype=_F32)

    def step(state, xs):
        qb, kb, vb, bb, gb, sb = xs
        o, state = _chunked(qb, kb, vb, bb, gb, state, sb, int(chunk_size))
        return state, o

    xs = tuple(blocks(x) for x in (q, k, v, beta, log_decay, starts))
    state, o = jax.lax.scan(step, state, xs)
    o = jnp.moveaxis(o, 0, 1).reshape(b, main, h, -1)
    if tail:
        cut = lambda x: None if x is None else x[:, main:]  # noqa: E731
        o_tail, state = _chunked(*(cut(x) for x in (q, k, v, beta, log_decay)), state,
                                 cut(starts), int(chunk_size))
        o = jnp.concatenate([o, o_tail], axis=1)
    return o, state


def _chunked(q, k, v, beta, log_decay, initial_state, starts, chunk_size):
    """One block: the chunked form over all of q's t tokens. Returns (o, final state)."""
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    c = min(int(chunk_size), t)
    n = -(-t // c)
    pad = n * c - t

    def chunked(x):  # [b, t, h, *f] -> [b, h, n, c, *f] float32, zero-padded along t
        x = jnp.pad(x.astype(_F32), [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
        x = x.reshape(b, n, c, *x.shape[2:])
        return jnp.moveaxis(x, 3, 1)

    qc, kc, vc, bc = chunked(q), chunked(k), chunked(v), chunked(beta)
    gc = jnp.zeros_like(bc) if log_decay is None else chunked(log_decay)  # [b, h, n, c]
    m = _masks(starts, b, n, c)
    incl = np.tril(np.ones((c, c), bool))
    strict = np.tril(np.ones((c, c), bool), -1)
    # Γ_ij = exp(Σ_{j<r<=i} g_r) on j <= i inside one segment, else 0 (exponent 0 before exp)
    same = incl if m is None else incl & m["same"]
    gam = jnp.where(same, jnp.exp(jnp.where(incl, range_sums(gc), 0.0)), 0.0)  # [b, h, n, c, c]
    from_start = jnp.exp(jnp.cumsum(gc, axis=-1))[..., None]  # e^{γ_i}  [b, h, n, c, 1]
    to_end = jnp.exp(_sum_after(gc, axis=-1))[..., None]  # e^{γ_c − γ_j}
    chunk_decay = from_start[..., -1, :]  # [b, h, n, 1]
    if m is not None:
        from_start = from_start * m["cont"]
        to_end = to_end * m["to_end"]
        chunk_decay = chunk_decay * m["alive"]

    bk = bc[..., None] * kc
    l = jnp.where(strict, jnp.einsum("bhnik,bhnjk->bhnij", bk, kc) * gam, 0.0)
    tri = unit_lower_inverse(l)
    u = jnp.einsum("bhnij,bhnjv->bhniv", tri, bc[..., None] * vc)
    wk = jnp.einsum("bhnij,bhnjk->bhnik", tri, bk * from_start)
    scores = jnp.einsum("bhnik,bhnjk->bhnij", qc, kc) * gam
    k_out = kc * to_end

    state0 = jnp.zeros((b, h, dk, dv), _F32) if initial_state is None else initial_state
    # inside shard_map the carry must vary like the inputs (zeros_like keeps their mesh axes)
    state0 = state0.astype(_F32) + jnp.zeros_like(qc[:, :, 0, 0, :, None])

    def step(s, xs):
        u_n, wk_n, k_out_n, decay_n = xs
        w = u_n - jnp.einsum("bhck,bhkv->bhcv", wk_n, s)
        s_next = decay_n[..., None] * s + jnp.einsum("bhck,bhcv->bhkv", k_out_n, w)
        return s_next, (s, w)

    by_chunk = lambda x: jnp.moveaxis(x, 2, 0)  # noqa: E731
    final, (s_in, w) = jax.lax.scan(step, state0, tuple(map(by_chunk, (u, wk, k_out, chunk_decay))))
    s_in, w = jnp.moveaxis(s_in, 0, 2), jnp.moveaxis(w, 0, 2)  # [b, h, n, k, v], [b, h, n, c, v]
    o = jnp.einsum("bhnck,bhnkv->bhncv", qc * from_start, s_in) + \
        jnp.einsum("bhnij,bhnjv->bhniv", scores, w)
    o = jnp.moveaxis(o, 1, 3).reshape(b, n * c, h, dv)[:, :t]
    return o.astype(q.dtype), final


def _masks(starts, b, n, c):
    """Segment masks of every chunk from starts [b, t] bool (None: no segments). cnt [b, n, c]
    counts the starts in the chunk up to and including each position: "same" [b, 1, n, c, c] pairs
    of one segment, "cont" [b, 1, n, c, 1] rows that read the chunk-start state, "to_end" keys
    that reach the chunk-end state, "alive" [b, 1, n, 1] chunks the carried state crosses."""
    if starts is None:
        return None
    st = jnp.pad(starts, ((0, 0), (0, n * c - starts.shape[1]))).reshape(b, n, c)
    cnt = jnp.cumsum(st.astype(jnp.int32), axis=-1)[:, None]  # [b, 1, n, c]
    f32 = lambda x: x.astype(_F32)  # noqa: E731
    return {"same": cnt[..., :, None] == cnt[..., None, :],
            "cont": f32(cnt == 0)[..., None],
            "to_end": f32(cnt == cnt[..., -1:])[..., None],
            "alive": f32(cnt[..., -1] == 0)[..., None]}
