"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, arXiv 2412.06464): the gated delta rule, as fla's
`GatedDeltaNet` layer computes it.

Legend: b batch, t sequence, d width, h heads, e = d/h key head dim, r = model.gdn.expand_v, re the
value head dim, K = model.gdn.conv_size.

    q, k, v = silu(conv_K(X̄ [W_q | W_k | W_v]))       W_q, W_k [d, d], W_v [d, r·d]; a causal
                                                       depthwise convolution of width K, one filter
                                                       per channel, no bias (fla: ShortConvolution)
    q ← q / ‖q‖ · e^-1/2,  k ← k / ‖k‖                 per head (L2 over e; eps 1e-6 inside the root)
    β_t = sigmoid(X̄ W_β)                              W_β [d, h]
    g_t = −exp(A_log) · softplus(X̄ W_a + dt_bias)     W_a [d, h]; A_log, dt_bias [h] (Mamba-2's decay)
    S_t = exp(g_t)(I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t,   o_t = q_t S_t      S [e, re] per head
    O = (RMSNorm(o) ⊙ w_norm ⊙ silu(X̄ W_g)) W_o       per head over re, w_norm [re]; W_g [d, r·d],
                                                       W_o [r·d, d]

The delta rule runs in kernels_pallas.delta_rule (impl: model.impl; a decode step of one token
uses the token scan). Initialisation as fla's: A = exp(A_log) uniform in (0, 16); dt = exp(U(log
1e-3, log 1e-1)) floored at 1e-4, dt_bias = softplus⁻¹(dt); the convolution uniform in ±1/√K; the
projections normal(init_std); w_norm ones.

Options (GDNOptions, `--config.model.gdn.<option>`): expand_v r (2, as published: the value head is
twice the key head) and conv_size K (4, as published; 0 drops the convolution and keeps the SiLU).
At the CPU ladder's head dim 16 a head's state is 16 × 32 floats. The key width is d (h heads of
e = d/h), so the mixer has (2 + 3r)·d² projection parameters (8d² at r = 2); fla's released
configs set the key width to 0.75·d with head dim 256 (6d²), a ratio the ladder's head dim 16
cannot keep at every width. The block around the mixer is the linear models' (SimpleRMSNorm, GLU
without activation; `model.norm_scale=true`, `model.glu_act=silu` give fla's block).
The decoding cache is {"state": [b, h, e, re] float32, "conv": the last K − 1 projected inputs
[b, K − 1, (2 + r)·d]}. Table-1 terms and the exact FLOPs: docs/models.md, "Gated DeltaNet".
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import PartitionSpec as P

from kernels_pallas import delta_rule, delta_rule_step
from linscale_jax.axes import logical_to_spec
from linscale_jax.models import registry
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.layers import KeyGen, Linear, dense, merge_heads
from linscale_jax.models.linear_common import kernel_mesh, kernel_shard_map, short_conv
from linscale_jax.models.options import option

L2_EPS = 1e-6  # fla's l2norm: x / sqrt(Σx² + eps)


@dataclasses.dataclass(frozen=True)
class GDNOptions:
    """model.gdn: expand_v, the value head dim over the key head dim (2, as published); conv_size,
    the short convolution's width on q, k, v (4, as published; 0 = none)."""

    expand_v: int = option(2, shape=True, minimum=1)
    conv_size: int = option(4, shape=True, minimum=0)

    def check(self, cfg) -> None:
        if cfg.short_conv:
            raise ValueError(f"model.short_conv={cfg.short_conv}: gdn has its own convolution on q, "
                             f"k, v (model.gdn.conv_size={self.conv_size}); set "
                             "--config.model.short_conv=0 and choose --config.model.gdn.conv_size.")

    def check_sequence(self, cfg, seq_len: int, name: str) -> None:
        if self.conv_size > seq_len:
            raise ValueError(
                f"model.gdn.conv_size={self.conv_size} is wider than the sequence ({name}={seq_len}): "
                f"its taps beyond the first token would read only padding; use a width <= {seq_len} "
                "(as published: --config.model.gdn.conv_size=4).")


def widths(cfg) -> tuple[int, int]:
    """(key width h·e = d, value width h·r·e = r·d)."""
    return cfg.d_model, cfg.gdn.expand_v * cfg.d_model


def l2_normalize(x):
    """x / sqrt(Σx² + eps) over the last axis, in float32; returns x.dtype."""
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.sum(xf * xf, axis=-1, keepdims=True) + L2_EPS)).astype(x.dtype)


def dt_bias_init(key, n: int) -> jax.Array:
    """softplus⁻¹(dt), dt = exp(U(log 1e-3, log 1e-1)) floored at 1e-4 (Mamba-2, fla)."""
    dt = jnp.exp(jax.random.uniform(key, (n,)) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    dt = jnp.maximum(dt, 1e-4)
    return dt + jnp.log(-jnp.expm1(-dt))


class GatedDeltaNet(nnx.Module):
    """x [b, t, d] -> [b, t, d] (module doc)."""

    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        d, h, std = cfg.d_model, cfg.n_heads, cfg.init_std
        dk, dv = widths(cfg)
        self.wq = Linear(d, dk, keys=keys, std=std, axes=("embed", "heads"))
        self.wk = Linear(d, dk, keys=keys, std=std, axes=("embed", "heads"))
        self.wv = Linear(d, dv, keys=keys, std=std, axes=("embed", "heads"))
        self.wa = Linear(d, h, keys=keys, std=std, axes=("embed", "heads"))
        self.wb = Linear(d, h, keys=keys, std=std, axes=("embed", "heads"))
        self.wg = Linear(d, dv, keys=keys, std=std, axes=("embed", "heads"))
        self.wo = Linear(dv, d, keys=keys, std=std, axes=("heads", "embed"))
        self.a_log = nnx.Param(jnp.log(jax.random.uniform(keys(), (h,), jnp.float32, 0.0, 16.0)),
                               axes=("heads",))
        self.dt_bias = nnx.Param(dt_bias_init(keys(), h), axes=("heads",))
        self.norm_scale = nnx.Param(jnp.ones((dv // h,), jnp.float32), axes=(None,))
        width = cfg.gdn.conv_size
        self.conv = None if not width else nnx.Param(jax.random.uniform(
            keys(), (width, 2 * dk + dv), jnp.float32, -width ** -0.5, width ** -0.5),
            axes=(None, "heads"))
        self.cfg = cfg

    def __call__(self, x, *, positions, segment_ids, cache, extra):
        cfg = self.cfg
        b, t, _ = x.shape
        h, e = cfg.n_heads, cfg.head_dim
        dk, dv = widths(cfg)
        state, history = (cache["state"], cache.get("conv")) if cache is not None else (None, None)
        w = jnp.concatenate([lin.kernel[...] for lin in (self.wq, self.wk, self.wv)], axis=1)
        z = dense(x, w.astype(x.dtype))  # [b, t, 2dk + dv]: q, k, v in one matmul
        if self.conv is not None:
            z, history = short_conv(z, self.conv[...], positions, history)
        z = jax.nn.silu(z)
        q, k, v = jnp.split(z, [dk, 2 * dk], axis=-1)
        q = l2_normalize(q.reshape(b, t, h, e)) * jnp.asarray(e ** -0.5, x.dtype)
        k = l2_normalize(k.reshape(b, t, h, e))
        v = v.reshape(b, t, h, dv // h)
        beta = jax.nn.sigmoid(self.wb(x).astype(jnp.float32))  # [b, t, h]
        a = self.wa(x).astype(jnp.float32) + self.dt_bias[...]
        log_decay = -jnp.exp(self.a_log[...]) * jax.nn.softplus(a)  # [b, t, h] <= 0
        o, state = run_delta_rule(cfg, q, k, v, beta, log_decay, segment_ids, state)
        gate = jax.nn.silu(self.wg(x).astype(jnp.float32)).reshape(b, t, h, dv // h)
        of = o.astype(jnp.float32)
        of = of * jax.lax.rsqrt(jnp.mean(of * of, axis=-1, keepdims=True) + cfg.out_norm_eps)
        o = (of * self.norm_scale[...] * gate).astype(x.dtype)
        y = self.wo(merge_heads(o))
        if cache is None:
            return y, None
        new = {"state": state}
        if self.conv is not None:
            new["conv"] = history
        return y, new

    def init_cache(self, batch_size: int, max_len: int):
        cfg = self.cfg
        dk, dv = widths(cfg)
        cache = {"state": jnp.zeros((batch_size, cfg.n_heads, cfg.head_dim, dv // cfg.n_heads),
                                    jnp.float32)}
        if cfg.gdn.conv_size:
            cache["conv"] = jnp.zeros((batch_size, cfg.gdn.conv_size - 1, 2 * dk + dv), jnp.float32)
        return cache


def _local_delta_rule(cfg, q, k, v, beta, log_decay, segment_ids, state):
    if state is not None and q.shape[1] == 1:  # one decode token: the scan's body
        o, state = delta_rule_step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0], state,
                                   log_decay=log_decay[:, 0])
        return o[:, None], state
    return delta_rule(q, k, v, beta, log_decay=log_decay, segment_ids=segment_ids,
                      initial_state=state, return_final_state=True, impl=cfg.impl,
                      chunk_size=cfg.chunk_size or None)


def run_delta_rule(cfg, q, k, v, beta, log_decay, segment_ids, state):
    """q, k [b, t, h, e]; v [b, t, h, re]; beta, log_decay [b, t, h] float32; segment_ids [b, t] |
    None; state None (training) or [b, h, e, re] float32 -> (o [b, t, h, re], new state or None).

    Under a mesh (linear_common.kernel_mesh) the kernel runs inside `jax.shard_map`: batch over
    ('data', 'fsdp'), heads over 'tensor' (each device its own rows and heads; XLA cannot
    partition a Pallas call). The sequence is not split: the delta rule's chunk-to-chunk carry is
    a product of transitions with no prefix combine here, so a 'seq' axis > 1 is refused."""
    mesh = kernel_mesh()
    if mesh is None:
        o, new = _local_delta_rule(cfg, q, k, v, beta, log_decay, segment_ids, state)
        return o, (None if state is None else new)
    if dict(mesh.shape).get("seq", 1) > 1:
        raise ValueError("gdn: the delta rule does not run sequence-parallel; set --config.mesh.seq=1 "
                         "(batch and heads shard over data, fsdp and tensor).")
    act = logical_to_spec(("batch", "length", "heads", "kv"), q.shape, mesh, where="delta_rule q")
    b_ax, h_ax = act[0], act[2]
    o_spec, per_token, state_spec = P(b_ax, None, h_ax, None), P(b_ax, None, h_ax), P(b_ax, h_ax, None, None)
    operands = [(q, o_spec), (k, o_spec), (v, o_spec), (beta, per_token), (log_decay, per_token),
                (segment_ids, P(b_ax, None)), (state, state_spec)]

    def kernel(q, k, v, beta, g, seg, s):
        o, new = _local_delta_rule(cfg, q, k, v, beta, g, seg, s)
        return o if state is None else (o, new)

    out = kernel_shard_map(mesh, kernel, operands, o_spec if state is None else (o_spec, state_spec))
    return (out, None) if state is None else out


# --- accounting --------------------------------------------------------------------------------

def chunk_length(cfg, seq_len: int) -> int:
    """The delta rule's chunk c: model.chunk_size, or the backend's default for model.impl and the
    key head dim e (kernels_pallas.delta_rule), at most seq_len."""
    from kernels_pallas.delta_rule.api import resolve_impl
    from kernels_pallas.delta_rule.config import default_chunk_size

    return min(cfg.chunk_size or default_chunk_size(resolve_impl(cfg.impl), key_dim=cfg.head_dim),
               seq_len)


def delta_rule_flops(n_heads: int, key_dim: int, value_dim: int, chunk: int) -> float:
    """Forward FLOPs per token of the chunked delta rule (the WY / UT-transform form), chunk c: per
    chunk and head the matmuls β K Kᵀ, Q Kᵀ and T·(β e^γ K) (3c²k), T·(β V) and (QKᵀ ⊙ Γ)·W (2c²v), the
    carry W = U − Wk S, the state update and Q S (3ckv), and the unit-lower inverse T by block
    doubling, c'(c'² − 1)/3 multiply-adds (c' = c rounded up to a power of two); 2 FLOPs each."""
    c, k, v = chunk, key_dim, value_dim
    c2 = 1 << max(0, (c - 1).bit_length())
    macs = 3 * c * c * k + 2 * c * c * v + 3 * c * k * v + c2 * (c2 * c2 - 1) / 3
    return n_heads * 2 * macs / c


def conv_channels(cfg) -> int:
    """Channels of the convolution: q, k and v, (2 + r)·d."""
    dk, dv = widths(cfg)
    return 2 * dk + dv


def _layer_flops(cfg, seq_len: int, chunk: int) -> float:
    """Beyond the shared 2·4d²: the wider value, gate and output projections 2·(3r − 2)·d², W_a and
    W_β 2·2dh, the convolution 2·K·(2 + r)d and the chunked delta rule (its own chunk)."""
    d, h, e, r = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.gdn.expand_v
    return (2 * (3 * r - 2) * d * d + 4 * d * h + 2 * cfg.gdn.conv_size * conv_channels(cfg)
            + delta_rule_flops(h, e, r * e, chunk_length(cfg, seq_len)))


def _paper_params(cfg) -> int:
    """Table-1 N of one layer beyond 12·d²: the projections' (3r − 2)d², W_a and W_β 2dh, the
    convolution K(2 + r)d (A_log, dt_bias and the norm's r·e gains left out, as Table 1 leaves out
    norm gains)."""
    d, h = cfg.d_model, cfg.n_heads
    return (3 * cfg.gdn.expand_v - 2) * d * d + 2 * d * h + cfg.gdn.conv_size * conv_channels(cfg)


def _paper_flops_x(cfg, n: int) -> float:
    """x of Table-1 C/D = 72·l·d²·(1 + x) (docs/models.md, "Gated DeltaNet"): the projections
    (3r − 2)/12, the recurrent delta rule 6·h·e·re per token (read kᵀS, update, q S) r/(4h), W_a
    and W_β h/(6d), the convolution K(2 + r)/(12d), and LLaMA's and TNL's block term 5/(18d)."""
    d, h, r, width = cfg.d_model, cfg.n_heads, cfg.gdn.expand_v, cfg.gdn.conv_size
    return (3 * r - 2) / 12 + r / (4 * h) + h / (6 * d) + width * (2 + r) / (12 * d) + 5 / (18 * d)


def state_floats(cfg, n: int) -> int:
    """h·e·re (the state) + (K − 1)·(2 + r)·d (the convolution's last inputs)."""
    r, width = cfg.gdn.expand_v, cfg.gdn.conv_size
    return cfg.n_heads * cfg.head_dim * r * cfg.head_dim + max(width - 1, 0) * conv_channels(cfg)


registry.register(registry.ArchSpec(
    name="gdn", mixer=GatedDeltaNet, options=GDNOptions, paper_params_layer=_paper_params,
    paper_flops_x=_paper_flops_x, layer_flops=_layer_flops, state_floats=state_floats))
