"""Per-chunk math of the Pallas delta-rule kernels (forward, state sweep and reverse sweep): the
chunk's decay factors and segment masks, the UT transform, the chunk step and its backward, on
2-d blocks of one chunk of one head. Block specs and the Static description of a call are here too.

Kernel layout (legend: b batch, t sequence padded to a multiple of the chunk C, h heads, k key
dim, v value dim, n = t / C chunks):
    q, k: [b, t, h*k]; v, o: [b, t, h*v]   (free reshapes; a block is one chunk of one head)
    beta, g: [b, h, t, 1] float32          (a block is a [C, 1] column)
    seg: [b, t, 1] float32 (segments only): the starts counted from the chunk start up to and
         including each position
    state: [b, h, k, v] float32 (S as in the math, so every matmul is NN, NT or TN);
    states: [b, h, n*k, v] float32, the chunk-start states of the backward pass;
    tri: [b, h, t, C] float32, every chunk's T (a residual of the forward for the backward).

One chunk, rows i, j (the math of xla.py): Γ_ij = exp(Σ_{j<r<=i} g_r) for j <= i in one segment;
e_start_i = exp(Σ_{r<=i} g_r) (0 after a start in the chunk), e_end_j = exp(Σ_{r>j} g_r) (0 before
the chunk's last start), dec = exp(Σ_r g_r) (0 if a segment starts in the chunk);
L = β ⊙ (K Kᵀ ⊙ Γ), strictly lower; T = (I + L)^{-1};
    W = T (β ⊙ V) − T (β e_start ⊙ K) S
    O = (e_start ⊙ Q) S + (Q Kᵀ ⊙ Γ) W,   S' = dec S + (e_end ⊙ K)ᵀ W.
Range sums: a matmul of a 0/1 mask with the log decays at HIGHEST (direct sums, never a
difference of prefix sums), or masked lane / sublane reductions. The inverse doubles block-diagonal
inverses, X ← X − X (L ⊙ off_p) X for p = 1, 2, …, C/2, on full [C, C] matrices (off_p: the pairs in
one 2p-block, in different p-blocks): matmuls and iota masks only.

Matmul precision (`Static.mxu`): "bfloat16" feeds the MXU bf16 operands with f32 accumulation,
except the range sums (f32 at HIGHEST) and the products that carry the recurrence (the inverse, the
state read W's S term, the state update and their gradients), whose float32 operands go in as bf16
hi + lo pairs (linear_attention.pallas_chunk.mm_split: relative error ~2^-16); "float32": every
matmul f32 at HIGHEST (the reference path). Derivation of the backward: docs/models.md, "The delta
rule".
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from kernels_pallas.linear_attention.pallas_chunk import F32, GridMixin, _dot, _dot_split

_NN, _NT, _TN = ((1,), (0,)), ((1,), (1,)), ((0,), (0,))


def mm(a, b, dt, dims=_NN, split=False):
    """dot_general of 2-d a, b (dims: _NN a @ b, _NT a @ bᵀ, _TN aᵀ @ b), f32 result; operands in
    dt (split: float32 operands as bf16 hi + lo pairs)."""
    return (_dot_split if split else _dot)(a, b, dims, dt)


@dataclasses.dataclass(frozen=True)
class Static(GridMixin):
    """Compile-time description of one call (its grid: linear_attention.pallas_chunk.GridMixin)."""

    chunk: int
    num_heads: int
    key_dim: int
    value_dim: int
    gated: bool
    segments: bool
    interpret: object  # False (compile with Mosaic) | pltpu.InterpretParams | True
    mxu: str = "float32"  # matmul operand dtype: "bfloat16" (MXU rate) | "float32" (HIGHEST)
    in_dtype: str = "float32"  # dtype of q, k, v and the output cotangent (cost.py's pass count)
    grid_order: str = "bhn"  # "bhn": grid (b, h, n) | "hbn": grid (h, b, n)
    vmem_limit_bytes: int | None = None



# ----------------------------------------------------------------------------- block specs


def _chunk(reverse):
    def index(c):
        return pl.num_programs(2) - 1 - c if reverse else c
    return index


def token_spec(st: Static, width: int, reverse: bool = False):
    """One chunk of one head of a [b, t, h*width] array (width 1: [b, t, 1], shared by heads)."""
    at = _chunk(reverse)

    def index(i, j, c):
        b, h = st.batch_head(i, j)
        return (b, at(c), h if width != 1 else 0)

    return pl.BlockSpec((None, st.chunk, width), index)


def gate_spec(st: Static, reverse: bool = False):
    """One chunk of one head of a [b, h, t, 1] array: a [C, 1] column."""
    at = _chunk(reverse)
    return pl.BlockSpec((None, None, st.chunk, 1),
                        lambda i, j, c: (*st.batch_head(i, j), at(c), 0))


def state_spec(st: Static):
    """[b, h, k, v]: the head's state, the same block at every chunk."""
    return pl.BlockSpec((None, None, st.key_dim, st.value_dim),
                        lambda i, j, c: (*st.batch_head(i, j), 0, 0))


def states_spec(st: Static, reverse: bool = False):
    """[b, h, n*k, v]: chunk c's start state."""
    at = _chunk(reverse)
    return pl.BlockSpec((None, None, st.key_dim, st.value_dim),
                        lambda i, j, c: (*st.batch_head(i, j), at(c), 0))


def tri_spec(st: Static, reverse: bool = False):
    """[b, h, t, C]: chunk c's T."""
    at = _chunk(reverse)
    return pl.BlockSpec((None, None, st.chunk, st.chunk),
                        lambda i, j, c: (*st.batch_head(i, j), at(c), 0))


def gate_specs(st: Static, reverse: bool = False):
    """In-specs of (g if gated, seg if segments, beta), the order of `split_gates`."""
    return ([gate_spec(st, reverse)] if st.gated else []) + \
        ([token_spec(st, 1, reverse)] if st.segments else []) + [gate_spec(st, reverse)]


def split_gates(st: Static, refs):
    """(g_ref | None, seg_ref | None, beta_ref, rest) of a kernel's refs."""
    g_ref = seg_ref = None
    if st.gated:
        g_ref, refs = refs[0], refs[1:]
    if st.segments:
        seg_ref, refs = refs[0], refs[1:]
    return g_ref, seg_ref, refs[0], refs[1:]


# ----------------------------------------------------------------------------- masks and decays


def _iota(n):
    return (jax.lax.broadcasted_iota(jnp.int32, (n, n), 0),
            jax.lax.broadcasted_iota(jnp.int32, (n, n), 1))


def _f(x):
    return x.astype(F32)


def row_of(col):
    """[C, 1] column -> [1, C] row (a sublane reduction of the column on the diagonal)."""
    i, j = _iota(col.shape[0])
    return jnp.sum(jnp.where(i == j, col, 0.0), axis=0, keepdims=True)


@dataclasses.dataclass
class Decay:
    """Factors of one chunk: gam [C, C] (Γ ⊙ the causal segment mask, 1 on the diagonal),
    start [C, 1] (e_start ⊙ cont), end [C, 1] (e_end ⊙ to_end), dec [1, 1] (gated: None when
    ungated without segments), mask [C, C] 0/1 (j <= i in one segment), the log-decay column g
    and the row sums rs_start / rs_end (gated; for the backward)."""

    gam: object
    start: object
    end: object
    dec: object
    mask: object
    g: object = None


def chunk_decay(st: Static, g_ref, seg_ref, pairs: bool = True) -> Decay:
    """The chunk's factors; pairs=False (the state sweep, which reads T) leaves gam None."""
    c = st.chunk
    i, j = _iota(c)
    mask = j <= i
    cont = to_end = alive = None
    if seg_ref is not None:
        cnt = seg_ref[...].astype(F32)  # [C, 1]
        last = cnt[c - 1:c, :]  # [1, 1]
        mask = mask & (cnt == row_of(cnt))
        cont, to_end, alive = _f(cnt == 0.0), _f(cnt == last), _f(last == 0.0)
    if not st.gated:
        return Decay(gam=_f(mask), start=cont, end=to_end, dec=alive, mask=_f(mask))
    g = g_ref[...].astype(F32)  # [C, 1]
    g_row = row_of(g)  # [1, C]
    gam = None
    if pairs:  # Σ_{j<r<=i} g_r = Σ_r [r <= i] (g_r [r > j]): a 0/1 mask times the log decays
        pair = mm(_f(j <= i), jnp.where(i > j, g, 0.0), F32)  # rows r of the rhs: g_r [r > j]
        gam = jnp.where(mask, jnp.exp(pair), 0.0)
    upto = jnp.sum(jnp.where(j <= i, g_row, 0.0), axis=1, keepdims=True)  # Σ_{r<=i} g_r
    after = jnp.sum(jnp.where(j > i, g_row, 0.0), axis=1, keepdims=True)  # Σ_{r>i} g_r
    start, end, dec = jnp.exp(upto), jnp.exp(after), jnp.exp(upto[c - 1:c, :])
    if seg_ref is not None:
        start, end, dec = start * cont, end * to_end, dec * alive
    return Decay(gam=gam, start=start, end=end, dec=dec, mask=_f(mask), g=g)


def _scale(x, s):
    return x if s is None else x * s


def operand(x_in, s):
    """x ⊙ s as a matmul operand: float32 when a factor s scales it, else x in its input dtype (a
    split matmul then needs no low part for it)."""
    return x_in if s is None else x_in.astype(F32) * s


# ----------------------------------------------------------------------------- the UT transform


def unit_lower_inverse(l, dt):
    """(I + l)^{-1} of a strictly lower [C, C] float32 l, C a power of two, by doubling."""
    c = l.shape[0]
    i, j = _iota(c)
    x = _f(i == j)
    p = 1
    block = lambda x, n: jax.lax.div(x, jnp.int32(n))  # noqa: E731 (x >= 0: floor division)
    while p < c:
        off = (block(i, 2 * p) == block(j, 2 * p)) & (block(i, p) != block(j, p))
        x = x - mm(mm(x, jnp.where(off, l, 0.0), dt, split=True), x, dt, split=True)
        p *= 2
    return x


@dataclasses.dataclass
class Chunk:
    """The chunk's state-independent terms: decay (Decay), kk = K Kᵀ, qk = Q Kᵀ [C, C] float32
    (None where unused), tri = T [C, C], u = T (β V) [C, v], wk = T (β e_start K) [C, k]."""

    decay: Decay
    kk: object
    qk: object
    tri: object
    u: object
    wk: object


def chunk_terms(st: Static, q, k, v, beta, decay: Decay, tri=None) -> Chunk:
    """q (None: no outputs wanted), k [C, k], v [C, v] in the input dtype (direct matmul
    operands); beta [C, 1] float32; tri: T [C, C] when known (the backward reads the forward's),
    else computed here."""
    dt = st.dt
    kk = None if tri is not None and q is None else mm(k, k, dt, _NT)  # the state sweep: unused
    qk = None if q is None else mm(q, k, dt, _NT)
    if tri is None:
        i, j = _iota(st.chunk)
        tri = unit_lower_inverse(jnp.where(i > j, beta * kk * decay.gam, 0.0), dt)
    u = mm(tri, beta * v.astype(F32), dt, split=True)
    wk = mm(tri, _scale(beta, decay.start) * k.astype(F32), dt, split=True)
    return Chunk(decay, kk, qk, tri, u, wk)


def chunk_w(st: Static, ch: Chunk, s):
    """W = U − Wk S [C, v] from the chunk-start state s [k, v]."""
    return ch.u - mm(ch.wk, s, st.dt, split=True)


def chunk_step(st: Static, ch: Chunk, q, k, s):
    """The chunk's recurrence from state s [k, v]: (o [C, v] (None when q is None), s' [k, v]),
    float32."""
    dt, d = st.dt, ch.decay
    w = chunk_w(st, ch, s)
    o = None if q is None else mm(operand(q, d.start), s, dt) + mm(ch.qk * d.gam, w, dt)
    s_new = _scale(s, d.dec) + mm(operand(k, d.end), w, dt, _TN, split=True)
    return o, s_new


def chunk_backward(st: Static, ch: Chunk, q, k, v, beta, s, w, do, ds):
    """Gradients of one chunk step: s the chunk-start state, w its W, do [C, v] the output's and
    ds [k, v] the end state's cotangent. Returns (dq, dk [C, k], dv [C, v], dbeta, dg [C, 1] (dg
    None when ungated), ds_start [k, v]), all float32."""
    dt, d = st.dt, ch.decay
    c = st.chunk
    i, j = _iota(c)
    kf, vf = k.astype(F32), v.astype(F32)
    q_in, k_out = operand(q, d.start), operand(k, d.end)
    k_b = _scale(beta, d.start) * kf
    a = ch.qk * d.gam
    # the chunk step: W = U − Wk S, O = Q_in S + A W, S' = dec S + K_outᵀ W
    dw = mm(a, do, dt, _TN) + mm(k_out, ds, dt, split=True)
    ds_start = mm(q_in, do, dt, _TN, split=True) - mm(ch.wk, dw, dt, _TN, split=True) + \
        _scale(ds, d.dec)
    da = jnp.where(d.mask > 0, mm(do, w, dt, _NT), 0.0)
    dq_in = mm(do, s, dt, _NT, split=True)
    dk_out = mm(w, ds, dt, _NT, split=True)
    dwk = -mm(dw, s, dt, _NT, split=True)
    # U = T (β V), Wk = T K_b, T = (I + L)^{-1}
    dt_ = mm(dw, beta * vf, dt, _NT, split=True) + mm(dwk, k_b, dt, _NT, split=True)
    dvb = mm(ch.tri, dw, dt, _TN, split=True)
    dkb = mm(ch.tri, dwk, dt, _TN, split=True)
    dl = -mm(mm(ch.tri, dt_, dt, _TN, split=True), ch.tri, dt, _NT, split=True)
    dl = jnp.where(i > j, dl, 0.0)
    m = ch.kk * d.gam
    dm = beta * dl
    dkk = dm * d.gam
    dqk = da * d.gam
    dq = mm(dqk, k, dt, split=True) + _scale(dq_in, d.start)
    dk = mm(dqk, q, dt, _TN, split=True) + mm(dkk, k, dt, split=True) + \
        mm(dkk, k, dt, _TN, split=True) + _scale(dk_out, d.end) + _scale(beta, d.start) * dkb
    dv = beta * dvb
    dbeta = jnp.sum(dl * m, axis=1, keepdims=True) + jnp.sum(dvb * vf, axis=1, keepdims=True) + \
        _scale(jnp.sum(dkb * kf, axis=1, keepdims=True), d.start)
    if not st.gated:
        return dq, dk, dv, dbeta, None, ds_start
    # the log decays: through Γ (pairs), e_start (rows of Q_in, K_b), e_end (K_out), dec
    d_pair = (dm * ch.kk + da * ch.qk) * d.gam  # dL/d(Σ_{j<r<=i} g_r)
    d_upto = jnp.sum(dq_in * q_in.astype(F32), axis=1, keepdims=True) + \
        jnp.sum(dkb * k_b, axis=1, keepdims=True)
    if d.dec is not None:
        d_end = jnp.sum(ds * s) * d.dec  # the chunk decay = exp(Σ_{r<=C-1} g_r)
        d_upto = d_upto + jnp.where(i[:, :1] == c - 1, d_end, 0.0)
    d_after = jnp.sum(dk_out * k_out.astype(F32), axis=1, keepdims=True)
    up_row, af_row = row_of(d_upto), row_of(d_after)
    # dg_r = Σ_{i>=r} d_upto_i + Σ_{j<r} d_after_j + Σ_{i>=r, j<r} d_pair_ij
    cover = mm(_f(j <= i), d_pair, F32, _TN)  # [r, j]: Σ_{i>=r} d_pair_ij
    dg = jnp.sum(jnp.where(j >= i, up_row, 0.0), axis=1, keepdims=True) + \
        jnp.sum(jnp.where(j < i, af_row + cover, 0.0), axis=1, keepdims=True)
    return dq, dk, dv, dbeta, dg, ds_start
