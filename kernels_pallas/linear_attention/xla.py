"""Chunked parallel linear attention in plain XLA (`impl="xla"`), for all three decay kinds.

Computes exactly what `reference.py` computes,

    S_t = Diag(exp(log_decay_t)) S_{t-1} + k_tᵀ v_t,   o_t = q_t S_t,

but a chunk of c tokens at a time: inside a chunk the outputs are a masked, decay-weighted matmul
(o_intra = A v with A_ij = Σ_k q_ik k_jk exp(L_ik - L_jk) for j <= i, L the log decay summed from j
exclusive to i inclusive); across chunks the state is carried by a `lax.scan` over chunks
(o_inter = (q ⊙ exp(decay since chunk start)) S_chunk_start). All work is fp32 (inputs are upcast);
the output has the dtype of q and the final state is fp32.

Shapes (legend: b batch, t sequence, h heads, k key dim, v value dim; inside: n chunks, c chunk len,
m sub-chunks per chunk, s sub-chunk len):
    q, k [b, t, h, k]; v [b, t, h, v]; log_decay None | [h] | [b, t, h, k]; state [b, h, k, v].

Numerics: every exponent that is exponentiated is <= 0 and is built as a *sum of log decays over a
contiguous range* (a forward cumsum from a reference point, or a reverse cumsum up to one), never as
a difference of two prefix sums. So nothing like exp(+cumsum) is formed, nothing overflows, and
there is no cancellation: with log decays of -20 per step, RESET_LOG_DECAY = -60 at segment starts
and near-0 decays mixed in one chunk, the weights keep full fp32 relative accuracy.

  * no decay: A = tril(q kᵀ).
  * per-head decay g [h]: a chunk position i has seen c_i = min(i + 1, valid) real steps, so the
    exponents are g · (c_i - c_j) with integer c_i - c_j >= 0 (exact); padded steps do not decay.
  * data-dependent decay [b, t, h, k] (secondary chunking): the chunk is cut into m sub-chunks of
    s <= 16 tokens. For a pair (i in sub-chunk I, j in sub-chunk J < I) the range splits at the
    sub-chunk boundaries into three non-positive pieces,
        Σ_{j<r<=i} g_r = lr_j (j to end of J) + gap_IJ (sub-chunks J+1..I-1) + lf_i (I start to i),
    so A_IJ = (q ⊙ exp(lf)) ⊙ exp(gap_IJ) @ (k ⊙ exp(lr))ᵀ: matmuls with per-sub-chunk reference
    points. For the diagonal blocks (I = J) the per-pair exponent Σ_{j<r<=i} g_r is formed
    explicitly as a [s, s, k] forward cumsum from each reference j (exact, cost s²·k per sub-chunk,
    like the register loop of GLA kernels). The block computation is wrapped in `jax.checkpoint`,
    so its [s, s, k] and [m, m, s, k] temporaries are recomputed in the backward pass, not stored:
    the saved residuals are the inputs, A [c, c] per chunk and the chunk-start states [n, k, v].

Padding: t is padded to a multiple of the chunk with zero q/k/v and zero log decay (a zero key or
value adds nothing; a zero log decay keeps the state), so the final state is the one after the last
real token. Gradients are plain JAX autodiff of this form. Masked entries are selected with
`jnp.where` on finite values (a masked exponent is 0, its exp is zeroed afterwards) and no exponent
is a difference, so no inf - inf, 0 · inf or NaN arises, also for log decays of -inf (decay 0).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

SUB_CHUNK = 16  # sub-chunk length s for the data-dependent kind (largest divisor of c <= this)

_F32 = jnp.float32


def linear_attention_xla(q, k, v, log_decay=None, initial_state=None, *, chunk_size=64):
    """Returns (o [b, t, h, v] in q.dtype, final_state [b, h, k, v] fp32); see the module doc."""
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(
            f"linear_attention_xla: chunk_size must be a positive int; got {chunk_size!r}."
        )
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    kind = "none" if log_decay is None else ("head" if log_decay.ndim == 1 else "data")

    if kind == "data":  # keep whole sub-chunks when the sequence is shorter than one chunk
        c = min(int(chunk_size), -(-t // SUB_CHUNK) * SUB_CHUNK)
    else:
        c = min(int(chunk_size), t)
    n = -(-t // c)
    pad = n * c - t

    def chunked(x):  # [b, t, h, f] -> [b, h, n, c, f] fp32, zero-padded along t
        x = jnp.pad(x.astype(_F32), ((0, 0), (0, pad), (0, 0), (0, 0)))
        return x.reshape(b, n, c, h, x.shape[-1]).transpose(0, 3, 1, 2, 4)

    qc, kc, vc = chunked(q), chunked(k), chunked(v)
    if kind == "none":
        a = jnp.einsum("bhnik,bhnjk->bhnij", qc, kc) * jnp.tril(jnp.ones((c, c), _F32))
        q_in, k_out, decay = qc, kc, None
    elif kind == "head":
        a, q_in, k_out, decay = _head_decay_terms(qc, kc, log_decay.astype(_F32), t)
    else:
        g = chunked(log_decay)
        lf = jnp.cumsum(g, axis=-2)  # Σ_{r<=i} g_r from the chunk start
        lr = _sum_after(g, axis=-2)  # Σ_{r>j} g_r up to the chunk end
        q_in, k_out, decay = qc * jnp.exp(lf), kc * jnp.exp(lr), jnp.exp(lf[..., -1, :])
        a = _data_decay_scores(qc, kc, g)

    state0 = (
        jnp.zeros((b, h, dk, dv), _F32) if initial_state is None else initial_state.astype(_F32)
    )
    starts, final = _carry_states(state0, k_out, vc, decay)  # starts [b, h, n, k, v]
    o = jnp.einsum("bhnij,bhnjv->bhniv", a, vc) + jnp.einsum("bhnik,bhnkv->bhniv", q_in, starts)
    o = o.transpose(0, 2, 3, 1, 4).reshape(b, n * c, h, dv)[:, :t]
    return o.astype(q.dtype), final


def _sum_after(x, axis):
    """y_j = Σ_{r>j} x_r along axis (exclusive reverse cumsum, formed without a subtraction)."""
    axis = axis % x.ndim
    rest = jax.lax.slice_in_dim(x, 1, None, axis=axis)
    zero = jnp.zeros_like(jax.lax.slice_in_dim(x, 0, 1, axis=axis))
    shifted = jnp.concatenate([rest, zero], axis=axis)
    return jax.lax.cumsum(shifted, axis=axis, reverse=True)


def _carry_states(state0, k_out, v, decay):
    """Inter-chunk sweep. k_out [b, h, n, c, k] (keys decayed to the chunk end), v [b, h, n, c, v],
    decay [b, h, n, k] | [h, n] | None (whole-chunk decay). Returns (chunk-start states
    [b, h, n, k, v], final state [b, h, k, v])."""
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
        if decay.ndim == 2:  # per head: [h, n] -> [n, 1, h, 1, 1]
            decay = decay.T[:, None, :, None, None]
        else:  # [b, h, n, k] -> [n, b, h, k, 1]
            decay = jnp.moveaxis(decay, 2, 0)[..., None]

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


def _sub_chunk_len(c):
    return max(d for d in range(1, min(SUB_CHUNK, c) + 1) if c % d == 0)


@jax.checkpoint
def _data_decay_scores(qc, kc, g):
    """Intra-chunk scores for data-dependent decay by secondary chunking (module docstring).
    qc, kc, g [..., c, k] fp32 -> A [..., c, c] with, for j <= i (else 0),
        A_ij = Σ_k q_ik k_jk exp(Σ_{j<r<=i} g_rk)."""
    *lead, c, dk = qc.shape
    s = _sub_chunk_len(c)
    m = c // s
    q4, k4, g4 = (x.reshape(*lead, m, s, dk) for x in (qc, kc, g))

    # off-diagonal blocks I > J: reference points at the sub-chunk boundaries
    lf = jnp.cumsum(g4, axis=-2)  # start of I .. i
    lr = _sum_after(g4, axis=-2)  # j (excl.) .. end of J
    tot = lf[..., -1, :]  # [..., m, k] whole sub-chunk
    later = np.arange(m)[None, :] > np.arange(m)[:, None]  # [J, K]: K > J
    between = jnp.where(later[..., None], tot[..., None, :, :], 0.0)  # [..., J, K, k]
    # Σ_{J<K<I} tot_K as an exclusive forward cumsum over K (no subtraction): shift K by one
    shifted = jnp.concatenate([jnp.zeros_like(between[..., :1, :]), between[..., :-1, :]], axis=-2)
    gap = jnp.cumsum(shifted, axis=-2)  # [..., J, I, k]
    below = (np.arange(m)[:, None] > np.arange(m)[None, :])  # [I, J]: I > J
    w = jnp.where(below[..., None], jnp.exp(jnp.swapaxes(gap, -2, -3)), 0.0)  # [..., I, J, k]
    q_hat = q4 * jnp.exp(lf)  # [..., I, i, k]
    k_hat = k4 * jnp.exp(lr)  # [..., J, j, k]
    qw = q_hat[..., :, None, :, :] * w[..., :, :, None, :]  # [..., I, J, i, k]
    a_off = jnp.einsum("...IJik,...Jjk->...IJij", qw, k_hat)

    # diagonal blocks: per-pair exponent Σ_{j<r<=i} g_r as a forward cumsum from each reference j
    after = np.arange(s)[None, :] > np.arange(s)[:, None]  # [j, r]: r > j
    expo = jnp.where(after[..., None], g4[..., None, :, :], 0.0)  # [..., I, j, r, k]
    expo = jnp.cumsum(expo, axis=-2)  # [..., I, j, i, k]
    causal = (np.arange(s)[None, :] >= np.arange(s)[:, None])[..., None]  # [j, i, 1]: i >= j
    e = jnp.where(causal, jnp.exp(expo), 0.0)
    a_diag = jnp.sum(q4[..., None, :, :] * k4[..., :, None, :] * e, axis=-1)  # [..., I, j, i]
    a_diag = jnp.swapaxes(a_diag, -1, -2)  # [..., I, i, j]

    blocks = a_off + np.eye(m, dtype=np.float32)[:, :, None, None] * a_diag[..., :, None, :, :]
    return jnp.swapaxes(blocks, -3, -2).reshape(*lead, c, c)  # [..., I, i, J, j] -> [..., c, c]
