"""Chunked parallel linear attention in plain XLA (`impl="xla"`), for all three decay kinds.

    linear_attention_xla(q, k, v, log_decay=None, initial_state=None, starts=None, *, kind=None,
                         chunk_size=64, block_len="auto") -> (o, final_state)

Computes exactly what `reference.py` computes, S_t = Diag(exp(log_decay_t)) S_{t-1} + k_tᵀ v_t,
o_t = q_t S_t, a chunk of c tokens at a time: inside a chunk a masked, decay-weighted matmul, across
chunks the state carried by a `lax.scan`. Every exponent is a sum of log decays over a contiguous
range (<= 0), never a difference of prefix sums, so nothing overflows or cancels; the data decay's
in-chunk weights are built by binary merging of blocks; segment starts are masks beside the decay;
t is padded to a multiple of the chunk with zeros. Derivation: docs/models.md, "The xla form".
All work is fp32; o has q's dtype, the final state is fp32. Gradients are JAX autodiff.

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim; inside: n chunks, c chunk len,
m leaf blocks per chunk, s leaf block len, p merged block len):
    q, k [b, t, h, k]; v [b, t, h, v]; log_decay None | [h] | [b, t, h, k]; state [b, h, k, v];
    starts None | [b, t] bool.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from kernels_pallas.linear_attention.config import xla_block_len, xla_remat_data_decay
from kernels_pallas.linear_attention.kind import DecayKind

_F32 = jnp.float32


def linear_attention_xla(q, k, v, log_decay=None, initial_state=None, starts=None, *, kind=None,
                         chunk_size=64, block_len="auto"):
    """Returns (o [b, t, h, v] in q.dtype, final_state [b, h, k, v] fp32); see the module doc.
    starts: None | [b, t] bool segment starts; kind: DecayKind (None: resolved from log_decay).
    block_len: tokens per step of the outer sequential sweep ("auto": config.xla_block_len for
    this backend; None: one block). Blocks keep the working set of one step in cache, so the time
    grows linearly with t; the last t mod block_len tokens are one more (static) call."""
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(
            f"linear_attention_xla: chunk_size must be a positive int; got {chunk_size!r}."
        )
    kind = DecayKind.of(log_decay) if kind is None else DecayKind(kind)
    if block_len == "auto":
        block_len = xla_block_len(chunk_size)
    t = q.shape[1]
    if block_len is None or t < 2 * block_len:
        return _chunked(q, k, v, log_decay, initial_state, starts, kind, int(chunk_size))
    nb, tail = divmod(t, block_len)
    main = nb * block_len

    def blocks(x):  # [b, t, ...] -> [nb, b, block_len, ...] (the first nb * block_len tokens)
        x = x[:, :main]
        return jnp.moveaxis(x.reshape(x.shape[0], nb, block_len, *x.shape[2:]), 1, 0)

    data = kind.per_token
    xs = (blocks(q), blocks(k), blocks(v), blocks(log_decay) if data else None,
          None if starts is None else blocks(starts))
    b, _, h, dk = q.shape
    state = jnp.zeros((b, h, dk, v.shape[-1]), _F32) if initial_state is None else initial_state
    state = state.astype(_F32) + jnp.zeros_like(q[:, 0, :, :, None], dtype=_F32)

    def step(state, x):
        qb, kb, vb, lb, sb = x
        o, state = _chunked(qb, kb, vb, lb if data else log_decay, state, sb, kind,
                            int(chunk_size))
        return state, o

    state, o = jax.lax.scan(step, state, xs)
    o = jnp.moveaxis(o, 0, 1).reshape(b, main, h, -1)
    if tail:
        o_tail, state = _chunked(
            q[:, main:], k[:, main:], v[:, main:], log_decay[:, main:] if data else log_decay,
            state, None if starts is None else starts[:, main:], kind, int(chunk_size))
        o = jnp.concatenate([o, o_tail], axis=1)
    return o, state


def _chunked(q, k, v, log_decay, initial_state, starts, kind, chunk_size):
    """One block: the chunked form over all of q's t tokens. Returns (o, final state)."""
    b, t, h, dk = q.shape
    dv = v.shape[-1]

    if kind.per_token:  # a sequence shorter than one chunk: pad to a power of two
        c = min(int(chunk_size), 1 << (t - 1).bit_length())
    else:
        c = min(int(chunk_size), t)
    n = -(-t // c)
    pad = n * c - t

    def chunked(x):  # [b, t, h, f] -> [b, h, n, c, f] fp32, zero-padded along t
        x = jnp.pad(x.astype(_F32), ((0, 0), (0, pad), (0, 0), (0, 0)))
        return x.reshape(b, n, c, h, x.shape[-1]).transpose(0, 3, 1, 2, 4)

    qc, kc, vc = chunked(q), chunked(k), chunked(v)
    terms = kind.pick(_no_decay, _head_decay, _data_decay)
    a, q_in, k_out, decay = terms(qc, kc, log_decay, chunked, t)
    if starts is not None:
        a, q_in, k_out, decay = _segment_masks(starts, n, c, a, q_in, k_out, decay)

    state0 = (
        jnp.zeros((b, h, dk, dv), _F32) if initial_state is None else initial_state.astype(_F32)
    )
    starts_s, final = _carry_states(state0, k_out, vc, decay)  # [b, h, n, k, v]
    o = jnp.einsum("bhnij,bhnjv->bhniv", a, vc) + jnp.einsum("bhnik,bhnkv->bhniv", q_in, starts_s)
    o = o.transpose(0, 2, 3, 1, 4).reshape(b, n * c, h, dv)[:, :t]
    return o.astype(q.dtype), final


# The decay kinds' chunk terms: (qc, kc [b, h, n, c, k], log_decay, chunked, t) -> (a [b, h, n, c, c]
# the masked intra-chunk scores, q_in / k_out [b, h, n, c, k] the queries decayed from the chunk start
# and the keys to its end, decay None | broadcastable to [b, h, n, k] the whole-chunk decay).


def _no_decay(qc, kc, log_decay, chunked, t):
    c = qc.shape[-2]
    a = jnp.einsum("bhnik,bhnjk->bhnij", qc, kc) * jnp.tril(jnp.ones((c, c), _F32))
    return a, qc, kc, None


def _head_decay(qc, kc, log_decay, chunked, t):
    a, q_in, k_out, decay = _head_decay_terms(qc, kc, log_decay.astype(_F32), t)
    return a, q_in, k_out, decay[None, :, :, None]  # decay [1, h, n, 1]


def _data_decay(qc, kc, log_decay, chunked, t):
    terms = jax.checkpoint(_data_decay_terms) if xla_remat_data_decay() else _data_decay_terms
    a, lf, lr = terms(qc, kc, chunked(log_decay))
    return a, qc * jnp.exp(lf), kc * jnp.exp(lr), jnp.exp(lf[..., -1, :])


def _segment_masks(starts, n, c, a, q_in, k_out, decay):
    """Document resets inside the chunked form, beside any decay kind. starts [b, t] bool.
    cnt [b, n, c] counts the segment starts in the chunk up to and including each position:
    pairs (i, j) of one chunk interact iff cnt_i == cnt_j; a row reads the carried state iff no start
    precedes it in the chunk (cnt_i == 0); a key reaches the chunk-end state iff it is in the chunk's
    last segment; the carried state crosses the chunk iff the chunk has no start. All masks are
    [b, n, c(, c)]: nothing of size [b, t, h, k] is added."""
    b = starts.shape[0]
    st = jnp.pad(starts, ((0, 0), (0, n * c - starts.shape[1]))).reshape(b, n, c)
    cnt = jnp.cumsum(st.astype(jnp.int32), axis=-1)
    same = (cnt[..., :, None] == cnt[..., None, :]).astype(_F32)[:, None]  # [b, 1, n, c, c]
    cont = (cnt == 0).astype(_F32)[:, None, :, :, None]  # [b, 1, n, c, 1]
    to_end = (cnt == cnt[..., -1:]).astype(_F32)[:, None, :, :, None]
    alive = (cnt[..., -1] == 0).astype(_F32)[:, None, :, None]  # [b, 1, n, 1]
    decay = alive if decay is None else decay * alive
    return a * same, q_in * cont, k_out * to_end, decay


def _sum_after(x, axis):
    """y_j = Σ_{r>j} x_r along axis (exclusive reverse cumsum, formed without a subtraction)."""
    axis = axis % x.ndim
    rest = jax.lax.slice_in_dim(x, 1, None, axis=axis)
    zero = jnp.zeros_like(jax.lax.slice_in_dim(x, 0, 1, axis=axis))
    shifted = jnp.concatenate([rest, zero], axis=axis)
    return jax.lax.cumsum(shifted, axis=axis, reverse=True)


def _carry_states(state0, k_out, v, decay):
    """Inter-chunk sweep. k_out [b, h, n, c, k] (keys decayed to the chunk end), v [b, h, n, c, v],
    decay None or the whole-chunk decay broadcastable to [b, h, n, k] (e.g. [1, h, n, 1] per head).
    Returns (chunk-start states [b, h, n, k, v], final state [b, h, k, v])."""
    n = k_out.shape[2]
    updates = jnp.einsum("bhnck,bhncv->nbhkv", k_out, v)  # parallel over chunks
    # inside shard_map the carry must vary over the mesh axes the inputs vary over (zeros_like keeps
    # them), or scan rejects the carry type
    state0 = state0 + jnp.zeros_like(updates[0])

    if decay is None:
        def step(s, u):
            return s + u, s
        xs = updates
    else:
        decay = jnp.moveaxis(decay, 2, 0)[..., None]  # [n, b|1, h|1, k|1, 1]

        def step(s, x):
            u, d = x
            return d * s + u, s
        xs = (updates, decay)
    final, starts = jax.lax.scan(step, state0, xs, length=n)
    return jnp.moveaxis(starts, 0, 2), final


def _head_decay_terms(qc, kc, g, t):
    """Per-head decay g [h]. Position i of chunk n has seen cnt_i = min(i + 1, valid_n) real steps
    since the chunk start (padded steps do not decay).
    Returns (A [b, h, n, c, c], q_in and k_out [b, h, n, c, k] (q, k decayed from the chunk start
    and to the chunk end), chunk decay [h, n])."""
    n, c = qc.shape[2], qc.shape[3]
    valid = np.clip(t - np.arange(n) * c, 0, c)  # [n] real tokens per chunk (static)
    cnt = np.minimum(np.arange(1, c + 1)[None, :], valid[:, None]).astype(np.float32)  # [n, c]
    diff = cnt[:, :, None] - cnt[:, None, :]  # [n, i, j] steps from j (excl.) to i (incl.)
    causal = np.tril(np.ones((c, c), bool))[None]
    gh = g[:, None, None, None]  # [h, 1, 1, 1]
    # where-guards: a per-head log decay of -inf times 0 steps must give exponent 0, not NaN
    expo = jnp.where(diff > 0, gh * diff, 0.0)
    dmat = jnp.where(causal, jnp.exp(expo), 0.0)  # [h, n, i, j]
    a = jnp.einsum("bhnik,bhnjk->bhnij", qc, kc) * dmat[None]

    def scaled(steps):  # exp(g · steps), steps >= 0 [n, c] -> [1, h, n, c, 1]
        return jnp.exp(jnp.where(steps > 0, g[:, None, None] * steps, 0.0))[None, ..., None]

    q_in = qc * scaled(cnt)
    k_out = kc * scaled(valid[:, None].astype(np.float32) - cnt)
    decay = jnp.exp(jnp.where(valid > 0, g[:, None] * valid.astype(np.float32), 0.0))  # [h, n]
    return a, q_in, k_out, decay


def _odd_part(c):
    """Largest odd divisor of c: the leaf block length of the data-kind hierarchy."""
    while c % 2 == 0:
        c //= 2
    return c


def _data_decay_terms(qc, kc, g):
    """Data-dependent decay g [..., c, k] by binary secondary chunking (module docstring).
    qc, kc, g [..., c, k] fp32 -> (A [..., c, c] with, for j <= i (else 0),
    A_ij = Σ_k q_ik k_jk exp(Σ_{j<r<=i} g_rk); fwd [..., c, k] = Σ_{r<=i} g_r from the chunk start;
    bwd [..., c, k] = Σ_{r>j} g_r up to the chunk end)."""
    *lead, c, dk = qc.shape
    s = _odd_part(c)
    m = c // s
    # leaf blocks of s tokens: A per pair (s = 1: just q_i · k_i), fwd / bwd sums inside each leaf
    q4, k4, g4 = (x.reshape(*lead, m, s, dk) for x in (qc, kc, g))
    if s == 1:
        # q_i · k_i as a batched matmul, not a sum over the minor k axis, slow on CPU
        # (docs/results.md, "CPU train-step choices")
        a = jnp.einsum("...ik,...jk->...ij", q4, k4)  # [..., m, 1, 1]
        fwd, bwd = g4, jnp.zeros_like(g4)
    else:
        a = _pairwise_scores(q4, k4, g4)
        fwd, bwd = jnp.cumsum(g4, axis=-2), _sum_after(g4, axis=-2)
    # merge neighbouring blocks (x, y) of p tokens into blocks of 2p: for i in y, j in x the range
    # sum is bwd_x[j] + fwd_y[i] (both <= 0), so the new off-diagonal block is a plain matmul
    p = s
    while p < c:
        nb = c // (2 * p)
        qy = qc.reshape(*lead, nb, 2, p, dk)[..., 1, :, :]
        kx = kc.reshape(*lead, nb, 2, p, dk)[..., 0, :, :]
        a2 = a.reshape(*lead, nb, 2, p, p)
        f2 = fwd.reshape(*lead, nb, 2, p, dk)
        r2 = bwd.reshape(*lead, nb, 2, p, dk)
        fx, fy, rx, ry = f2[..., 0, :, :], f2[..., 1, :, :], r2[..., 0, :, :], r2[..., 1, :, :]
        off = jnp.einsum("...ik,...jk->...ij", qy * jnp.exp(fy), kx * jnp.exp(rx))
        top = jnp.concatenate([a2[..., 0, :, :], jnp.zeros_like(off)], axis=-1)
        low = jnp.concatenate([off, a2[..., 1, :, :]], axis=-1)
        a = jnp.concatenate([top, low], axis=-2)  # [..., nb, 2p, 2p]
        fwd = jnp.concatenate([fx, fx[..., -1:, :] + fy], axis=-2)
        bwd = jnp.concatenate([rx + fy[..., -1:, :], ry], axis=-2)
        p *= 2
    return a.reshape(*lead, c, c), fwd.reshape(*lead, c, dk), bwd.reshape(*lead, c, dk)


def _pairwise_scores(q4, k4, g4):
    """Leaf blocks: q4, k4, g4 [..., m, s, k] -> [..., m, s, s] with the per-pair exponent
    Σ_{j<r<=i} g_r formed explicitly as a forward cumsum from each reference j (exact)."""
    s = q4.shape[-2]
    after = np.arange(s)[None, :] > np.arange(s)[:, None]  # [j, r]: r > j
    expo = jnp.where(after[..., None], g4[..., None, :, :], 0.0)  # [..., m, j, r, k]
    expo = jnp.cumsum(expo, axis=-2)  # [..., m, j, i, k]
    causal = (np.arange(s)[None, :] >= np.arange(s)[:, None])[..., None]  # [j, i, 1]: i >= j
    e = jnp.where(causal, jnp.exp(expo), 0.0)
    a = jnp.sum(q4[..., None, :, :] * k4[..., :, None, :] * e, axis=-1)  # [..., m, j, i]
    return jnp.swapaxes(a, -1, -2)
