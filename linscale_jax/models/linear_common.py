"""The linear mixers' shared front and their glue to `kernels_pallas.linear_attention` (the only
entry point).

    z, state, history = project(x, (wq, wk, wv), conv, positions, cache)  # fused q/k/v [b,t,3,d]
    o, cache = qkv_attention(cfg, x, (wq, wk, wv), conv, ...)  # TNL, cosFormer2: SiLU, LRPE, kernel

The front of every linear mixer: its three input projections in one matmul, then (model.short_conv
= K > 0) a causal depthwise convolution of width K over time on each projected channel (fla's
`use_short_conv`; Zoology, Based, GLA and Mamba put one in front of the mixer; no tap crosses a
packed document), then the
architecture's own activations. The paper's configs keep it off (K = 0). Decoding caches of a mixer
with the convolution are {"state": [b,h,k,v], "conv": the last K-1 projected inputs [b,K-1,3,d]}.

Legend: b batch, t sequence, h heads, k key dim, v value dim, d width, K convolution width.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from kernels_pallas import DecayKind, linear_attention
from kernels_pallas.linear_attention import seq_parallel
from flax import nnx

from linscale_jax.axes import logical_to_spec
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.layers import KeyGen, stacked_dense, unstack

# logical names of the kernel's operands (linscale_jax.axes.RULES maps them to mesh axes):
# q, k, v [b, t, h, k]: batch over ('data', 'fsdp'), t over 'seq', heads over 'tensor'.
_ACT_NAMES = ("batch", "length", "heads", "kv")


def linear_attention_flops(n_heads: int, key_dim: int, value_dim: int, chunk: int) -> int:
    """Forward FLOPs per token of the chunked linear attention, chunk c (linscale_jax.models.accounting):
    intra-chunk QKᵀ and PV over the full c×c block 2c(k + v), inter-chunk q S and kᵀv 2·2kv."""
    return n_heads * (2 * chunk * (key_dim + value_dim) + 4 * key_dim * value_dim)


def kernel_mesh():
    """The mesh the model is traced under (`jax.set_mesh` / `jax.sharding.use_abstract_mesh`, set
    by the trainer), or None when there is none or it has a single device."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty or mesh.size == 1:
        return None
    return mesh


def _local_attention(cfg: ModelConfig, q, k, v, log_decay, segment_ids, cache, seq_axis):
    """One device's share (or the whole arrays without a mesh) -> (o, final state). seq_axis: the
    mesh axis the sequence is split over (LASP carry across its shards), or None."""
    kw = dict(log_decay=log_decay, segment_ids=segment_ids, initial_state=cache,
              return_final_state=True, chunk_size=cfg.chunk_size or None)
    if seq_axis is not None:
        return seq_parallel.linear_attention_seq_shard(q, k, v, axis_name=seq_axis, impl=cfg.impl, **kw)
    impl = "reference" if cache is not None and q.shape[1] == 1 else cfg.impl
    return linear_attention(q, k, v, impl=impl, **kw)


def _varying_axes(x):
    aval = jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)
    return set(mat.varying) if mat is not None else set(getattr(aval, "vma", ()))


def vary(x, axes):
    """x marked as varying over the manual mesh `axes` it does not yet vary over (inside
    shard_map; a no-op in the forward, the kernels' custom VJPs expect it)."""
    missing = tuple(sorted(set(axes) - _varying_axes(x)))
    return jax.lax.pcast(x, missing, to="varying") if missing else x


def run_linear_attention(cfg: ModelConfig, q, k, v, log_decay, segment_ids, cache):
    """q,k [b,t,h,k]; v [b,t,h,v]; log_decay None | [h] | [b,t,h,k]; segment_ids [b,t] | None;
    cache None (training forward) or the state [b,h,k,v] float32 to continue from.

    Returns (o [b,t,h,v], new state or None). Packed documents: segment_ids go to the kernel, which
    zeroes the state at every change of id next to its own decay kind (no [b,t,h,k] decay tensor
    for TNL or cosFormer2). One-token steps use the exact recurrence (impl="reference").

    Under a mesh (see `kernel_mesh`) the kernel runs inside `jax.shard_map`: batch over ('data',
    'fsdp'), heads over 'tensor', so every device runs it on its own shard (XLA cannot partition a
    Pallas/Mosaic call); when the sequence is split over 'seq' the shards are joined by the LASP
    carry (each shard's final state is all-gathered and prefix-combined). An axis whose size does
    not divide its dimension is left unsplit."""
    mesh = kernel_mesh()
    if mesh is None:
        o, state = _local_attention(cfg, q, k, v, log_decay, segment_ids, cache, None)
        return o, (None if cache is None else state)
    act = logical_to_spec(_ACT_NAMES, q.shape, mesh, where="linear_attention q")
    b_ax, t_ax, h_ax = act[0], act[1], act[2]
    state_spec = P(b_ax, h_ax, None, None)
    o_spec = P(b_ax, t_ax, h_ax, None)
    per_token = DecayKind.of(log_decay).per_token
    operands = [(q, act), (k, act), (v, o_spec), (log_decay, act if per_token else P(h_ax)),
                (segment_ids, P(b_ax, t_ax)), (cache, state_spec)]

    def kernel(q, k, v, ld, seg, c):
        o, state = _local_attention(cfg, q, k, v, ld, seg, c, t_ax)
        return o if cache is None else (o, state)

    out = kernel_shard_map(mesh, kernel, operands, o_spec if cache is None else (o_spec, state_spec))
    return (out, None) if cache is None else out


def kernel_shard_map(mesh, kernel, operands, out_specs):
    """kernel(*arrays) inside `jax.shard_map` over `mesh`: operands [(array or None, its spec)],
    the None ones passed to the kernel as None. Every operand is marked varying over every manual
    axis, as the kernels' custom VJPs expect (a no-op in the forward; the backward sums a
    replicated operand's cotangent over the axis)."""
    present = [(x, spec) for x, spec in operands if x is not None]
    specs = tuple(spec for _, spec in present)
    manual = {a for spec in specs for ax in spec for a in ((ax,) if isinstance(ax, str) else ax or ())}

    def local(*xs):
        given = iter(vary(x, manual) for x in xs)
        return kernel(*(None if x is None else next(given) for x, _ in operands))

    return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=out_specs)(*(x for x, _ in present))


def zero_state(batch_size: int, n_heads: int, key_dim: int, value_dim: int):
    """[b, h, k, v] float32 zeros."""
    return jnp.zeros((batch_size, n_heads, key_dim, value_dim), jnp.float32)


def lrpe_theta_init(n_heads: int, d_model: int) -> np.ndarray:
    """θ [h, e] = 10000^(-2j/d), j = 0..d-1."""
    return (10000.0 ** (-2.0 * np.arange(d_model) / d_model)).reshape(n_heads, -1).astype(np.float32)


def lrpe(x, positions, theta):
    """x [b,t,...,h,e], positions [b,t], θ [h,e] -> [b,t,...,h,2e] (cos half, sin half), in x.dtype.
    The middle axes (e.g. q and k stacked [b,t,2,h,e]) share one cos / sin of the angles."""
    ang = positions.astype(jnp.float32)[:, :, None, None] * theta.astype(jnp.float32)[None, None]
    ang = ang.reshape(ang.shape[:2] + (1,) * (x.ndim - 4) + ang.shape[2:])
    xf = x.astype(jnp.float32)
    return jnp.concatenate([xf * jnp.cos(ang), xf * jnp.sin(ang)], axis=-1).astype(x.dtype)


# --- the front: fused projections and the short convolution -------------------------------------

N_PROJ = 3  # projections through the front (q, k, v; HGRN2: q, f, i)


def short_conv(z, kernel, positions, history=None):
    """Causal depthwise convolution over time: z [b, t, *c], kernel [K, *c], positions [b, t] (each
    token's position in its document, as the mixers get them) -> (y [b, t, *c] in z.dtype,
    history [b, K-1, *c] float32: the last K-1 inputs, for decoding).

    y_t = sum_{s=0}^{K-1} kernel[K-1-s] * z_{t-s} [positions_t >= s]: a tap never reaches before its
    document's first token (packed documents). Inputs before the sequence are `history` (zeros when
    None). Sums in float32 for narrower dtypes. The K-1 lagged taps run as one `lax.scan` over the
    lags (a dynamic slice each), so the program, and its compile time, do not grow with K; at K = 4
    it also runs faster than the taps written out one by one (`python bench/short_conv.py`)."""
    width, t = kernel.shape[0], z.shape[1]
    dtype = jnp.promote_types(z.dtype, jnp.float32)
    if history is None:
        full = jnp.pad(z, ((0, 0), (width - 1, 0)) + ((0, 0),) * (z.ndim - 2))
    else:
        full = jnp.concatenate([history.astype(z.dtype), z], axis=1)
    w = kernel.astype(dtype)
    bcast = positions.shape + (1,) * (z.ndim - 2)

    def tap(y, j):  # input j of the window [t - K + 1, t]: lag K - 1 - j
        x = jax.lax.dynamic_slice_in_dim(full, j, t, axis=1).astype(dtype)
        inside = (positions >= width - 1 - j).astype(dtype).reshape(bcast)
        return y + x * w[j] * inside, None

    y = z.astype(dtype) * w[width - 1]
    if width > 1:
        y, _ = jax.lax.scan(tap, y, jnp.arange(width - 1))
    return y.astype(z.dtype), full[:, t:].astype(jnp.float32)


class ShortConv(nnx.Module):
    """The kernel [K, 3, d] of model.short_conv = K over a mixer's fused projections [b, t, 3, d],
    initialised as PyTorch's Conv1d (fla's ShortConvolution): uniform in +-1/sqrt(K); no bias."""

    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        width, bound = cfg.short_conv, cfg.short_conv ** -0.5
        self.kernel = nnx.Param(jax.random.uniform(keys(), (width, N_PROJ, cfg.d_model), jnp.float32,
                                                   -bound, bound), axes=(None, None, "heads"))

    def __call__(self, z, positions, history):
        return short_conv(z, self.kernel[...], positions, history)


def make_short_conv(cfg: ModelConfig, keys: KeyGen):
    """ShortConv when model.short_conv > 0, else None (the paper's mixers)."""
    return ShortConv(cfg, keys=keys) if cfg.short_conv else None


def short_conv_layer_params(cfg) -> int:
    """Parameters of one layer's short convolution: K·3d (0 when off)."""
    return cfg.short_conv * N_PROJ * cfg.d_model


def short_conv_flops(cfg) -> int:
    """Forward FLOPs per token and layer of the short convolution: 2·K·3d."""
    return 2 * cfg.short_conv * N_PROJ * cfg.d_model


def short_conv_state_floats(cfg) -> int:
    """Decoding floats per layer and sequence of the convolution: the last K-1 inputs, (K-1)·3d."""
    return (cfg.short_conv - 1) * N_PROJ * cfg.d_model if cfg.short_conv else 0


def init_cache(cfg: ModelConfig, batch_size: int, key_dim: int):
    """A linear mixer's decoding cache: the state [b, h, key_dim, e] float32 zeros, with the
    convolution's history [b, K-1, 3, d] beside it when model.short_conv > 0."""
    state = zero_state(batch_size, cfg.n_heads, key_dim, cfg.head_dim)
    if not cfg.short_conv:
        return state
    return {"state": state, "conv": jnp.zeros((batch_size, cfg.short_conv - 1, N_PROJ, cfg.d_model),
                                              jnp.float32)}


def project(x, linears, conv, positions, cache):
    """x [b, t, d] through the mixer's three input kernels (one matmul, stacked_dense) and its
    short convolution (conv: ShortConv or None; positions [b, t] in the document) ->
    (z [b, t, 3, d], the state part of `cache`, the convolution's new history or None).
    cache: None (training), a state, or init_cache's dict."""
    z = stacked_dense(x, linears)
    state, history = (cache["state"], cache["conv"]) if isinstance(cache, dict) else (cache, None)
    if conv is None:
        return z, state, None
    z, history = conv(z, positions, history)
    return z, state, (history if cache is not None else None)


def join_cache(state, history):
    """The cache `project` split: the state alone, or {"state", "conv"} with the convolution."""
    return state if history is None else {"state": state, "conv": history}


def qkv_attention(cfg: ModelConfig, x, linears, conv, *, positions, segment_ids, cache, log_decay,
                  theta=None):
    """TNL's and cosFormer2's mixer core: q, k, v = project(x); q, k = SiLU, then LRPE with θ [h, e]
    when given (key dim 2e); the kernel with log_decay (None | [h]). x [b, t, d] ->
    (o [b, t, h, e], new cache or None)."""
    b, t, d = x.shape
    z, state, history = project(x, linears, conv, positions, cache)
    qk, v = jnp.split(z.reshape(b, t, N_PROJ, cfg.n_heads, d // cfg.n_heads), [2], axis=2)
    qk = jax.nn.silu(qk)
    if theta is not None:
        qk = lrpe(qk, positions, theta)  # one cos / sin for q and k
    (q, k), v = unstack(qk, 2), jnp.squeeze(v, 2)
    o, state = run_linear_attention(cfg, q, k, v, log_decay, segment_ids, state)
    return o, (None if cache is None else join_cache(state, history))
