"""Shared layers: Linear, Embed, RMSNorm, SimpleRMSNorm, GLU/SwiGLU, low-rank output gate.

Legend: b batch, t sequence, d width, g GLU width, v vocab, r gate rank (= d/h).
Parameters are float32 and carry logical axis names in the `axes` metadata (vocab, embed, heads,
mlp, rank, layers) for sharding rules. Matmuls run in the compute dtype; norms in float32.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from linscale_jax.models import registry


class KeyGen:
    """Deterministic stream of PRNG keys from one base key: keys() -> fold_in(base, i), i = 0, 1, ...
    (one nnx.Rngs draw per model, so abstract construction with nnx.eval_shape stays cheap)."""

    def __init__(self, base_key):
        self.base_key = base_key
        self.count = 0

    def __call__(self):
        self.count += 1
        return jax.random.fold_in(self.base_key, self.count - 1)


def normal_param(keys: KeyGen, shape, std: float, axes) -> nnx.Param:
    return nnx.Param(std * jax.random.normal(keys(), shape, jnp.float32), axes=tuple(axes))


class Linear(nnx.Module):
    """y = x @ kernel (no bias). kernel [in, out] float32, cast to x.dtype for the matmul."""

    def __init__(self, d_in: int, d_out: int, *, keys: KeyGen, std: float, axes):
        self.kernel = normal_param(keys, (d_in, d_out), std, axes)

    def __call__(self, x):
        return dense(x, self.kernel[...].astype(x.dtype))


@jax.custom_vjp
def dense(x, w):
    """y = x @ w: x [..., d_in], w [d_in, *out] ([d_in, d_out], or stacked [d_in, n, d_out]) ->
    [..., *out]; `jnp.tensordot(x, w, 1)` in values and gradients, with dW formed from the narrower
    transposed operand (docs/results.md, "CPU train-step choices"). The kernel keeps its axes, so
    the sharding of its output axes propagates unchanged."""
    return jnp.tensordot(x, w, 1)


def _dense_fwd(x, w):
    return dense(x, w), (x, w)


def _dense_bwd(res, g):
    x, w = res
    lead = x.ndim - 1
    dx = jnp.tensordot(g, w, (tuple(range(lead, g.ndim)), tuple(range(1, w.ndim))))
    tokens = (tuple(range(lead)), tuple(range(lead)))
    if w.ndim == 2 and w.shape[0] > w.shape[1]:  # wide input (GLU W_down): copy the narrower gᵀ
        dw = jnp.tensordot(g, x, tokens).T
    else:
        dw = jnp.tensordot(x, g, tokens)
    return dx.astype(x.dtype), dw.astype(w.dtype)


dense.defvjp(_dense_fwd, _dense_bwd)


# Fewer rows than this (decoding: one token per sequence) -> n separate matmuls: stacking copies
# every kernel each call, which costs more than the matmuls themselves at a few rows.
STACK_MIN_ROWS = 64


def stacked_dense(x, linears):
    """x [..., d_in] times n Linear kernels of one width -> [..., n, d_out].

    With at least STACK_MIN_ROWS rows, ONE matmul: the kernels are stacked [d_in, n, d_out] at
    compute time (the parameters stay separate, so checkpoints, converters and parameter shardings
    are unchanged): one wide matmul runs closer to the CPU's matmul peak than n narrow ones. With
    fewer rows (a decode step) the stacking copy would dominate, so n matmuls, stacked after."""
    ws = [lin.kernel[...].astype(x.dtype) for lin in linears]
    if math.prod(x.shape[:-1]) < STACK_MIN_ROWS:
        return jnp.stack([dense(x, w) for w in ws], axis=-2)
    return dense(x, jnp.stack(ws, axis=1))


def unstack(x, axis: int):
    """x [..., n, ...] -> n arrays without that axis, by `jnp.split` (whose gradient is one
    concatenate; indexing x[:, :, i] would pad each cotangent to the full shape and add them)."""
    return [jnp.squeeze(a, axis) for a in jnp.split(x, x.shape[axis], axis=axis)]


class Embed(nnx.Module):
    """Tied embedding: lookup tokens [b, t] -> [b, t, d]; attend x [b, t, d] -> fp32 logits [b, t, v]."""

    def __init__(self, vocab: int, d: int, *, keys: KeyGen, std: float):
        self.embedding = normal_param(keys, (vocab, d), std, ("vocab", "embed"))

    def __call__(self, tokens, dtype):
        return jnp.take(self.embedding[...], tokens, axis=0).astype(dtype)

    def attend(self, x):
        w = self.embedding[...].astype(x.dtype)
        return jnp.einsum("btd,vd->btv", x, w, preferred_element_type=jnp.float32)


def simple_rms_norm(x, eps: float):
    """SimpleRMSNorm x / sqrt(mean(x²) + eps) over the last axis, in float32; returns x.dtype."""
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return y.astype(x.dtype)


class RMSNorm(nnx.Module):
    """LLaMA RMSNorm with a learnable scale [d] (init 1), computed in float32."""

    def __init__(self, d: int, eps: float):
        self.scale = nnx.Param(jnp.ones((d,), jnp.float32), axes=("embed",))
        self.eps = eps

    def __call__(self, x):
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return (y * self.scale[...]).astype(x.dtype)


class SimpleRMSNorm(nnx.Module):
    """Parameter-free RMSNorm of the linear models."""

    def __init__(self, eps: float):
        self.eps = eps

    def __call__(self, x):
        return simple_rms_norm(x, self.eps)


def make_norm(cfg, eps: float | None = None):
    """RMSNorm with a learnable scale (llama, or model.norm_scale) or parameter-free SimpleRMSNorm."""
    eps = cfg.norm_eps if eps is None else eps
    if registry.get(cfg.arch).softmax_block or cfg.norm_scale:
        return RMSNorm(cfg.d_model, eps)
    return SimpleRMSNorm(eps)


class GLU(nnx.Module):
    """Channel mixer W_down(U ⊙ act(V)); act = silu (SwiGLU, llama) or identity (linear models).

    x [b, t, d] -> [b, t, d]; U, V: d×g, W_down: g×d.
    """

    def __init__(self, d: int, g: int, *, keys: KeyGen, std: float, activation: bool):
        self.w_u = Linear(d, g, keys=keys, std=std, axes=("embed", "mlp"))
        self.w_v = Linear(d, g, keys=keys, std=std, axes=("embed", "mlp"))
        self.w_down = Linear(g, d, keys=keys, std=std, axes=("mlp", "embed"))
        self.activation = activation

    def __call__(self, x):
        u, v = unstack(stacked_dense(x, (self.w_u, self.w_v)), -2)  # one matmul for U and V
        if self.activation:
            v = jax.nn.silu(v)
        return self.w_down(u * v)


class LowRankGate(nnx.Module):
    """Output gate G = sigmoid(x W_gdown W_gup), rank r: W_gdown d×r, W_gup r×d. x [b,t,d] -> [b,t,d]."""

    def __init__(self, d: int, r: int, *, keys: KeyGen, std: float):
        self.w_gdown = Linear(d, r, keys=keys, std=std, axes=("embed", "rank"))
        self.w_gup = Linear(r, d, keys=keys, std=std, axes=("rank", "embed"))

    def __call__(self, x):
        return jax.nn.sigmoid(self.w_gup(self.w_gdown(x)))


def split_heads(x, n_heads: int):
    """[b, t, h*e] -> [b, t, h, e]."""
    b, t, d = x.shape
    return x.reshape(b, t, n_heads, d // n_heads)


def merge_heads(x):
    """[b, t, h, e] -> [b, t, h*e]."""
    b, t, h, e = x.shape
    return x.reshape(b, t, h * e)
