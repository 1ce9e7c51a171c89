"""Per-chunk math shared by the Pallas linear-attention kernels (forward and backward): block
specs, the chunk's decay factors and segment masks, sub-chunks of the data decay, and the matmul
helpers (`mm`, `mm_nt`, `mm_tn` and the bf16 hi + lo `mm_split` forms) at the precision of
`Static.mxu`.

Kernel layout (legend: b batch, t sequence (padded to a multiple of the chunk C), h heads, k key dim,
v value dim, n = t / C chunks):
    q, k, g: [b, t, h*k]   (free reshape of [b, t, h, k]; a block is one chunk of one head)
    v, o:    [b, t, h*v]
    state:   [b, h, v, k] float32, stored transposed (Sᵀ) so that every matmul is NN, NT or TN
    a:       [h] float32 in SMEM (per-head log decay)
    g:       data-dependent log decay (float32)
    seg:     [b, t, 1] float32 (segments only): segment starts counted from the chunk start up to
             and including each position.
Every decay weight is exp of a direct sum of log decays over a contiguous range (<= 0); the range
sums run in f32 at HIGHEST, and exps, masks, carried states and gradient accumulators stay f32.
Derivation and precision: docs/models.md, "The Pallas kernels".
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels_pallas.linear_attention.kind import DecayKind

F32 = jnp.float32
_HI = jax.lax.Precision.HIGHEST


def _dot(a, b, dims, dt):
    """dot_general with `dt` operands and float32 accumulation: float32 at HIGHEST precision
    (the reference path), or bfloat16 operands as the MXU takes them (one pass)."""
    dt = jnp.dtype(dt)
    return jax.lax.dot_general(a.astype(dt), b.astype(dt), (dims, ((), ())),
                               precision=_HI if dt == F32 else None, preferred_element_type=F32)


def mm(a, b, dt=F32):
    """a [m, c] @ b [c, n], operands in dt, result float32."""
    return _dot(a, b, ((1,), (0,)), dt)


def mm_nt(a, b, dt=F32):
    """a [m, c] @ b[n, c]ᵀ."""
    return _dot(a, b, ((1,), (1,)), dt)


def mm_tn(a, b, dt=F32):
    """a[c, m]ᵀ @ b [c, n]."""
    return _dot(a, b, ((0,), (0,)), dt)


def _split(x, dt):
    """x as (hi, lo) in dt with hi + lo = x to ~2^-16 (lo None when x already is dt)."""
    if x.dtype == dt:
        return x, None
    hi = x.astype(dt)
    return hi, (x.astype(F32) - hi.astype(F32)).astype(dt)


def _dot_split(a, b, dims, dt):
    dt = jnp.dtype(dt)
    if dt == F32:
        return _dot(a, b, dims, F32)
    (ah, al), (bh, bl) = _split(a, dt), _split(b, dt)
    out = _dot(ah, bh, dims, dt)
    if al is not None:
        out = out + _dot(al, bh, dims, dt)
    if bl is not None:
        out = out + _dot(ah, bl, dims, dt)
    return out


def mm_split(a, b, dt=F32):
    """a [m, c] @ b [c, n] with every float32 operand fed as a bf16 (hi, lo) pair: 2 MXU passes
    (3 when both are float32), relative error ~2^-16 instead of ~2^-9. For dq and dk, whose
    products q ⊙ dq - k ⊙ dk the log-decay gradient differences."""
    return _dot_split(a, b, ((1,), (0,)), dt)


def mm_tn_split(a, b, dt=F32):
    """a[c, m]ᵀ @ b [c, n], as mm_split."""
    return _dot_split(a, b, ((0,), (0,)), dt)


class GridMixin:
    """The grid of a call description with fields num_heads, mxu and grid_order ("bhn": grid
    (b, h, n) | "hbn": grid (h, b, n)); the linear-attention and delta-rule Statics share it."""

    @property
    def dt(self):
        return jnp.dtype(self.mxu)

    def grid(self, b: int, n: int):
        return (b, self.num_heads, n) if self.grid_order == "bhn" else (self.num_heads, b, n)

    def batch_head(self, i, j):
        """(batch, head) of grid indices (i, j) of the two leading axes."""
        return (i, j) if self.grid_order == "bhn" else (j, i)

    def head_id(self):
        return pl.program_id(1 if self.grid_order == "bhn" else 0)


@dataclasses.dataclass(frozen=True)
class Static(GridMixin):
    """Compile-time description of one call: decay kind, block sizes, dims, real length, the
    matmul operand dtype and the grid order."""

    kind: DecayKind
    chunk: int
    sub: int
    num_heads: int
    key_dim: int
    value_dim: int
    t_real: int  # sequence length before padding (the head kind masks its decay beyond it)
    interpret: object  # False (compile with Mosaic) | pltpu.InterpretParams | True
    segments: bool = False  # a seg operand follows the decay operand
    mxu: str = "float32"  # matmul operand dtype: "bfloat16" (MXU rate) | "float32" (HIGHEST)
    grid_order: str = "bhn"  # "bhn": grid (b, h, n) | "hbn": grid (h, b, n)
    vmem_limit_bytes: int | None = None



@dataclasses.dataclass
class ChunkSegments:
    """Segment masks of one chunk (all float32 0/1): same [C, C], cont [C, 1] (reads the carried
    state), to_end [C, 1] (reaches the chunk-end state), alive [1, 1] (state crosses the chunk).
    Without segments every field is None and `masked` is the identity."""

    same: object = None
    cont: object = None
    to_end: object = None
    alive: object = None


def chunk_segments(seg_ref) -> ChunkSegments:
    if seg_ref is None:
        return ChunkSegments()
    cnt = seg_ref[...].astype(F32)  # [C, 1]
    n = cnt.shape[0]
    wide = jnp.broadcast_to(cnt, (n, n))
    last = cnt[n - 1:n, :]  # [1, 1]
    f = lambda x: x.astype(F32)  # noqa: E731
    return ChunkSegments(same=f(wide == wide.T), cont=f(cnt == 0.0), to_end=f(cnt == last),
                         alive=f(last == 0.0))


@dataclasses.dataclass
class ChunkDecay:
    """Decay factors of one chunk. gq/gk: [C, k] (data) | [C, 1] (head) | None (none);
    gs: [1, k] | scalar | None; d: [C, C] causal decay matrix (none/head); g: [C, k] (data)."""

    gq: object = None
    gk: object = None
    gs: object = None
    d: object = None
    g: object = None


def chunk_index(reverse: bool):
    c = pl.program_id(2)
    return pl.num_programs(2) - 1 - c if reverse else c


def _mask(n, fn):
    rows = jax.lax.broadcasted_iota(jnp.int32, (n, n), 0)
    cols = jax.lax.broadcasted_iota(jnp.int32, (n, n), 1)
    return fn(rows, cols)


def range_sums(g, fn):
    """Σ_r [fn(i, r)] g_r for every row i: g [C, k] -> [C, k] (a direct sum, as a 0/1 matmul)."""
    return mm(_mask(g.shape[0], fn).astype(F32), g, F32)


def chunk_decay(st: Static, a_ref, g_ref, reverse: bool = False) -> ChunkDecay:
    """Decay factors for the current grid step (chunk) and head."""
    n = st.chunk
    if st.kind == DecayKind.DATA:
        g = g_ref[...].astype(F32)
        upto = range_sums(g, lambda i, r: r <= i)  # Σ_{r<=i} g_r
        after = range_sums(g, lambda i, r: r > i)  # Σ_{r>i} g_r
        return ChunkDecay(gq=jnp.exp(upto), gk=jnp.exp(after), gs=jnp.exp(upto[n - 1:n]), g=g)
    causal = _mask(n, lambda r, c: c <= r)
    if st.kind == DecayKind.NONE:
        return ChunkDecay(d=causal.astype(F32))
    a = a_ref[st.head_id()]
    # Steps beyond the real length (padding) do not decay: count the real steps of this chunk.
    count = jnp.clip(st.t_real - chunk_index(reverse) * n, 0, n)
    pos_r = _mask(n, lambda r, c: jnp.minimum(r + 1, count)).astype(F32)
    pos_c = _mask(n, lambda r, c: jnp.minimum(c + 1, count)).astype(F32)
    d = jnp.exp(jnp.where(causal, a * (pos_r - pos_c), -jnp.inf))
    pos = pos_r[:, :1]  # [C, 1]
    total = count.astype(F32)
    return ChunkDecay(gq=jnp.exp(a * pos), gk=jnp.exp(a * (total - pos)), gs=jnp.exp(a * total),
                      d=d)


def scale(x, g):
    return x if g is None else x * g


class SubChunks:
    """Factors for the data-dependent intra-chunk part, sub-chunk of rows by sub-chunk."""

    def __init__(self, g, sub):
        self.g, self.sub = g, sub
        block = lambda i: jax.lax.div(i, jnp.int32(sub))  # noqa: E731 (i >= 0: floor division)
        same = lambda i, r: block(i) == block(r)  # noqa: E731
        self.head = range_sums(g, lambda i, r: same(i, r) & (r <= i))  # start of sub-chunk to i
        self.tail = range_sums(g, lambda i, r: same(i, r) & (r > i))  # i+1 to end of sub-chunk
        self.total = [self.head[m * sub + sub - 1:(m + 1) * sub] for m in range(g.shape[0] // sub)]

    def diag(self, blk):
        """exp(Σ_{j<r<=i} g_r) for i >= j inside sub-chunk blk, else 0: [s, s, k]."""
        s = self.sub
        g = self.g[blk * s:(blk + 1) * s]
        i = jax.lax.broadcasted_iota(jnp.int32, (s, s, s), 0)
        j = jax.lax.broadcasted_iota(jnp.int32, (s, s, s), 1)
        r = jax.lax.broadcasted_iota(jnp.int32, (s, s, s), 2)
        sel = ((j < r) & (r <= i)).astype(F32).reshape(s * s, s)
        expo = mm(sel, g, F32).reshape(s, s, -1)
        keep = jax.lax.broadcasted_iota(jnp.int32, (s, s, 1), 1) <= \
            jax.lax.broadcasted_iota(jnp.int32, (s, s, 1), 0)
        return jnp.exp(jnp.where(keep, expo, -jnp.inf))

    def off(self, blk):
        """Query factors exp(start of blk .. i) [s, k] and key factors exp(j .. start of blk)
        [blk*s, k] for every row j of the earlier sub-chunks; all <= 1."""
        s = self.sub
        fq = jnp.exp(self.head[blk * s:(blk + 1) * s])
        parts, gap = [], jnp.zeros_like(self.total[0])
        for m in range(blk - 1, -1, -1):  # gap = totals of the sub-chunks strictly between
            parts.append(jnp.exp(self.tail[m * s:(m + 1) * s] + gap))
            gap = gap + self.total[m]
        return fq, jnp.concatenate(parts[::-1], axis=0)


# ----------------------------------------------------------------------------- pallas_call plumbing


def chunk_spec(st: Static, width: int, reverse: bool = False):
    """One chunk of one head of a [b, t, h*width] array."""
    heads = width != 1  # a [b, t, 1] operand (seg) is shared by the heads

    def index(i, j, c):
        b, h = st.batch_head(i, j)
        return (b, pl.num_programs(2) - 1 - c if reverse else c, h if heads else 0)

    return pl.BlockSpec((None, st.chunk, width), index)


def state_spec(st: Static):
    return pl.BlockSpec((None, None, st.value_dim, st.key_dim),
                        lambda i, j, c: (*st.batch_head(i, j), 0, 0))


def smem_spec():
    return pl.BlockSpec(memory_space=pltpu.SMEM)


def decay_specs(st: Static, reverse: bool = False):
    """In-specs of the decay operand (head -> a [h] in SMEM, data -> g chunk, none -> nothing),
    then of the seg operand when st.segments (one chunk of [b, t, 1])."""
    specs = []
    if st.kind == DecayKind.HEAD:
        specs.append(smem_spec())
    elif st.kind == DecayKind.DATA:
        specs.append(chunk_spec(st, st.key_dim, reverse))
    if st.segments:
        specs.append(chunk_spec(st, 1, reverse))
    return specs


def exact_or_scaled(x_in, x32, g, m):
    """x ⊙ g ⊙ m as a matmul operand: float32 when a decay g scales it, else (a 0/1 mask m at
    most) exactly x's input dtype, so a split matmul needs no low part."""
    if g is None:
        return scale_mask(x32, m).astype(x_in.dtype)
    return scale_mask(x32 * g, m)


def scale_mask(x, m):
    """x * m for a segment mask m, or x when there are no segments (m None)."""
    return x if m is None else x * m


def call(kernel, st: Static, grid, in_specs, out_specs, out_shape, scratch, sequential: bool,
         cost=None, prefix="linear_attention_"):
    """pallas_call with TPU grid semantics; out_shape: (shape, dtype) pairs; cost: a
    pl.CostEstimate (kernels_pallas.linear_attention.cost); prefix: of the call's name (then the
    kernel function's). `st` needs `.interpret` and `.vmem_limit_bytes`. Inside shard_map the
    outputs are declared varying over every mesh axis any operand varies over."""
    semantics = ("parallel", "parallel", "arbitrary" if sequential else "parallel")
    single = isinstance(out_shape, tuple)

    def run(*args):
        varying = frozenset().union(*(jax.typeof(x).mat.varying for x in args))
        mat = jax.sharding.ManualAxisType(varying=varying) if varying else None
        shapes = [jax.ShapeDtypeStruct(s, d, manual_axis_type=mat)
                  for s, d in ([out_shape] if single else out_shape)]
        fn = pl.pallas_call(
            kernel,
            grid=grid,
            in_specs=in_specs,
            out_specs=out_specs,
            out_shape=shapes[0] if single else shapes,
            scratch_shapes=scratch,
            compiler_params=pltpu.CompilerParams(dimension_semantics=semantics,
                                                 vmem_limit_bytes=st.vmem_limit_bytes),
            interpret=st.interpret,
            cost_estimate=cost,
            name=prefix + getattr(kernel, "func", kernel).__name__.strip("_")
            .removesuffix("_kernel"),
        )
        if varying:  # every operand must vary over the same axes as the outputs
            args = [jax.lax.pcast(x, tuple(varying - jax.typeof(x).mat.varying), to="varying")
                    if varying - jax.typeof(x).mat.varying else x for x in args]
        return fn(*args)

    return run


def split_decay_refs(st: Static, refs):
    """Kernels receive (decay operand?, seg operand?, *rest); returns (a_ref, g_ref, seg_ref,
    rest)."""
    a_ref = g_ref = seg_ref = None
    if st.kind == DecayKind.HEAD:
        a_ref, refs = refs[0], refs[1:]
    elif st.kind == DecayKind.DATA:
        g_ref, refs = refs[0], refs[1:]
    if st.segments:
        seg_ref, refs = refs[0], refs[1:]
    return a_ref, g_ref, seg_ref, refs
