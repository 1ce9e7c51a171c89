"""Per-architecture checks against the notes' formulas (numpy, written from the notes, not the code)."""

import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from linscale_jax.models import ModelConfig, llama
from linscale_jax.models.cosformer2 import Cosformer2Attention
from linscale_jax.models.linear_common import lrpe, lrpe_theta_init
from linscale_jax.models.hgrn2 import HGRN2Mixer, beta_values, gate_log_f, lower_bounds_log
from linscale_jax.models.layers import STACK_MIN_ROWS, KeyGen, Linear, dense, stacked_dense
from linscale_jax.models.decoder import segment_starts
from linscale_jax.models.llama import causal_attention, rope, softmax_attention
from linscale_jax.models.tnl import TNLAttention, alibi_slopes, tnl_log_decay
from linscale_jax.models.tpe import LightNetTPE, XmixersTPE

D, H, T = 16, 2, 7
E = D // H


def cfg(arch, **kw):
    base = dict(arch=arch, n_layers=3, d_model=D, n_heads=H, ffn_dim=32, vocab_size=16,
                max_seq_len=64, impl="reference", init_std=0.2)
    base.update(kw)
    return ModelConfig(**base)


def np_(x):
    return np.asarray(x, np.float64)


def silu(x):
    return x / (1 + np.exp(-x))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def srms(x, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def heads(x):
    return x.reshape(x.shape[0], H, -1)  # [t, h, e]


def x_input(seed=0):
    return jax.random.normal(jax.random.key(seed), (1, T, D), jnp.float32)


# --- TNL -----------------------------------------------------------------------------------------


def test_tnl_decay_values():
    np.testing.assert_allclose(alibi_slopes(8), [2.0 ** -(i + 1) for i in range(8)])
    # h = 6: ALiBi interleave: slopes of 4 heads, then every other slope of 8 heads
    np.testing.assert_allclose(alibi_slopes(6), [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
    s4 = np.array([2**-2, 2**-4, 2**-6, 2**-8])
    for j, factor in enumerate([1 + 1e-5, 0.5 + 1e-5, 1e-5]):
        np.testing.assert_allclose(tnl_log_decay("alibi_layer", 4, j, 3), -s4 * factor, rtol=1e-6)
    np.testing.assert_allclose(tnl_log_decay("alibi_layer", 4, 0, 1), -s4 * (1 + 1e-5), rtol=1e-6)
    np.testing.assert_allclose(tnl_log_decay("paper", 4, 1, 2), [0, -1, -2, -3])


def test_tnl_mixer_matches_formula():
    c = cfg("tnl")
    m = TNLAttention(c, keys=KeyGen(jax.random.key(0)))
    x = x_input()
    y, _ = m(x, positions=jnp.arange(T)[None], segment_ids=None, cache=None,
             extra=jnp.asarray(tnl_log_decay("alibi_layer", H, 1, 3)))
    X = np_(x[0])
    q, k, v = (heads(f(X @ np_(w.kernel[...]))) for f, w in
               ((silu, m.wq), (silu, m.wk), (lambda a: a, m.wv)))
    lam = np.exp(tnl_log_decay("alibi_layer", H, 1, 3).astype(np.float64))  # [h]
    o = np.zeros((T, H, E))
    for t in range(T):
        for s in range(t + 1):
            o[t] += (lam ** (t - s) * (q[t] * k[s]).sum(-1))[:, None] * v[s]
    gate = sigmoid(X @ np_(m.gate.w_gdown.kernel[...]) @ np_(m.gate.w_gup.kernel[...]))
    ref = (srms(o.reshape(T, D)) * gate) @ np_(m.wo.kernel[...])
    np.testing.assert_allclose(y[0], ref, rtol=2e-4, atol=2e-5)


# --- HGRN2 ---------------------------------------------------------------------------------------


def test_hgrn2_lower_bounds():
    l = 5
    np.testing.assert_allclose(beta_values(jnp.ones((l, 3)))[:, 0], np.arange(l) / l, atol=1e-6)
    gamma = jax.random.normal(jax.random.key(1), (l, 3)) * 3
    g = np_(gamma)
    p = np.exp(g) / np.exp(g).sum(0)
    beta = np.cumsum(p, 0) - p[0]
    assert np.all(beta[0] == 0)
    log_beta, log_one_minus = lower_bounds_log(gamma)
    assert np.all(np.isneginf(np.asarray(log_beta[0])))
    np.testing.assert_allclose(np.exp(np_(log_beta[1:])), beta[1:], rtol=1e-5)
    np.testing.assert_allclose(np.exp(np_(log_one_minus)), 1 - beta, rtol=1e-5)
    z = jax.random.normal(jax.random.key(2), (4, 3)) * 8
    f = beta[2] + (1 - beta[2]) * sigmoid(np_(z))
    np.testing.assert_allclose(np.exp(np_(gate_log_f(z, log_beta[2], log_one_minus[2]))), f, rtol=1e-5)
    np.testing.assert_allclose(np.exp(np_(gate_log_f(z))), sigmoid(np_(z)), rtol=1e-5)
    assert float(log_one_minus[0, 0]) == 0.0  # layer 0: f = sigmoid(z) exactly
    np.testing.assert_array_equal(gate_log_f(z, log_beta[0], log_one_minus[0]), gate_log_f(z))


def test_hgrn2_mixer_matches_formula():
    c = cfg("hgrn2")
    m = HGRN2Mixer(c, keys=KeyGen(jax.random.key(0)))
    gamma = jax.random.normal(jax.random.key(3), (3, D))
    log_beta, log_one_minus = lower_bounds_log(gamma)
    x = x_input(1)
    y, _ = m(x, positions=jnp.arange(T)[None], segment_ids=None, cache=None,
             extra=(log_beta[2], log_one_minus[2]))
    X = np_(x[0])
    beta = np_(beta_values(gamma))[2]
    f = heads(beta + (1 - beta) * sigmoid(X @ np_(m.wf.kernel[...])))
    q = heads(silu(X @ np_(m.wq.kernel[...])))
    v = heads(X @ np_(m.wi.kernel[...]))
    S = np.zeros((H, E, E))
    o = np.zeros((T, H, E))
    for t in range(T):
        S = f[t][:, :, None] * S + (1 - f[t])[:, :, None] * v[t][:, None, :]
        o[t] = np.einsum("hk,hkv->hv", q[t], S)
    ref = srms(o.reshape(T, D)) @ np_(m.wo.kernel[...])
    np.testing.assert_allclose(y[0], ref, rtol=2e-4, atol=2e-5)


# --- cosFormer2 ----------------------------------------------------------------------------------


def test_lrpe_theta_and_relative_property():
    theta = lrpe_theta_init(H, D)
    assert theta.shape == (H, E)
    np.testing.assert_allclose(theta.reshape(-1), 10000.0 ** (-2 * np.arange(D) / D), rtol=1e-6)
    q = jax.random.normal(jax.random.key(4), (1, 1, H, E))
    k = jax.random.normal(jax.random.key(5), (1, 1, H, E))
    th = jnp.asarray(theta)

    def dot(t, s):
        return np_(jnp.sum(lrpe(q, jnp.array([[t]]), th) * lrpe(k, jnp.array([[s]]), th), -1))

    direct = (np_(q) * np_(k) * np.cos(np_(th) * 3)).sum(-1)
    np.testing.assert_allclose(dot(5, 2), direct, rtol=1e-5)
    np.testing.assert_allclose(dot(5, 2), dot(40, 37), rtol=1e-4)


def test_cosformer2_mixer_matches_formula():
    c = cfg("cosformer2")
    m = Cosformer2Attention(c, keys=KeyGen(jax.random.key(0)))
    x = x_input(2)
    y, _ = m(x, positions=jnp.arange(T)[None], segment_ids=None, cache=None, extra=None)
    X = np_(x[0])
    q, k = (heads(silu(X @ np_(w.kernel[...]))) for w in (m.wq, m.wk))
    v = heads(X @ np_(m.wv.kernel[...]))
    th = np_(m.theta[...])
    o = np.zeros((T, H, E))
    for t in range(T):
        for s in range(t + 1):
            a = (q[t] * k[s] * np.cos(th * (t - s))).sum(-1)  # [h]
            o[t] += a[:, None] * v[s]
    gate = sigmoid(X @ np_(m.gate.w_gdown.kernel[...]) @ np_(m.gate.w_gup.kernel[...]))
    ref = (srms(o.reshape(T, D)) * gate) @ np_(m.wo.kernel[...])
    np.testing.assert_allclose(y[0], ref, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("tied", [True, False])
def test_lightnet_tpe_is_up_toeplitz_down(tied):
    """y = x + (T W_up x̄) W_down, T_{ts} = (1-λ)λ^(t-s) per channel of the e-dim state; tied (the
    default, tpe=lightnet): W_down = W_upᵀ, d·e + e params (Table 1's d·e); untied 2·d·e + e."""
    c = cfg("cosformer2")
    tpe = LightNetTPE(c, keys=KeyGen(jax.random.key(0)), tied=tied)
    n_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(tpe, nnx.Param)))
    assert n_params == (1 if tied else 2) * D * E + E
    x = x_input(3)
    y, _ = tpe(x, None, None)
    X = np_(x[0])
    u = srms(X) @ np_(tpe.up.kernel[...])  # [t, e]
    lam = np.exp(-np.exp(np_(tpe.log_rate[...])))  # [e]
    assert 0.5 < lam.min() and lam.max() < 1 and np.ptp(1 / (1 - lam)) > 100  # memories ~2 .. 256
    s = np.zeros((T, E))
    for t in range(T):
        for r in range(t + 1):
            s[t] += (1 - lam) * lam ** (t - r) * u[r]
    down = np_(tpe.up.kernel[...]).T if tied else np_(tpe.down.kernel[...])
    np.testing.assert_allclose(y[0], X + s @ down, rtol=2e-4, atol=2e-5)


def test_xmixers_tpe_is_a_causal_toeplitz_per_head():
    c = cfg("cosformer2", cosformer2=dict(tpe="xmixers"))
    tpe = XmixersTPE(c, keys=KeyGen(jax.random.key(0)))
    n_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(tpe, nnx.Param)))
    assert n_params == D * E + 2 * D + H  # d·e (per-head projection) + q, k + decays
    x = x_input(3)
    y, _ = tpe(x, None, None)
    X = heads(np_(x[0]))
    qk = (np_(tpe.q[...]) * np_(tpe.k[...])).sum(-1)  # [h]
    lam = sigmoid(np_(tpe.decay_logit[...]))
    u = np.zeros((T, H, E))
    for t in range(T):
        for s in range(t + 1):
            u[t] += (qk * lam ** (t - s))[:, None] * X[s]
    ref = np.einsum("the,hef->thf", srms(u), np_(tpe.proj[...])).reshape(T, D)
    np.testing.assert_allclose(y[0], ref, rtol=2e-4, atol=2e-5)


# --- LLaMA ---------------------------------------------------------------------------------------


def test_rope_relative_and_theta():
    q = jax.random.normal(jax.random.key(6), (1, 1, 1, 8))
    k = jax.random.normal(jax.random.key(7), (1, 1, 1, 8))

    def dot(t, s):
        return float(jnp.sum(rope(q, jnp.array([[t]]), 1e4) * rope(k, jnp.array([[s]]), 1e4)))

    assert math.isclose(dot(9, 4), dot(30, 25), rel_tol=1e-4)
    # rotation of pair (x_i, x_{i+e/2}) by angle t·theta^(-2i/e)
    x = jnp.zeros((1, 1, 1, 8)).at[..., 1].set(1.0)
    r = np.asarray(rope(x, jnp.array([[3]]), 1e4))[0, 0, 0]
    ang = 3 * 1e4 ** (-2 / 8)
    np.testing.assert_allclose([r[1], r[5]], [math.cos(ang), math.sin(ang)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("block,kv_heads,packed,groups", [
    (None, 4, True, None), (3, 4, False, None), (5, 2, True, (1, 1)), (11, 4, True, None),
    (3, 4, True, (2, 1)), (5, 2, True, (2, 2)), (None, 4, False, (1, 4))])
def test_causal_attention_blocks_match_masked_softmax(block, kv_heads, packed, groups):
    """The query-blocked, post-normalized training form equals the full masked softmax: values and
    the gradients of q, k, v (t = 11 is not a multiple of the blocks; grouped-query kv_heads 2),
    whole or walked in groups of (batch rows, heads) recomputed in the backward."""
    b, t, h, e = 2, 11, 4, 8
    ks = jax.random.split(jax.random.key(11), 4)
    q = 2 * jax.random.normal(ks[0], (b, t, h, e))
    k = 2 * jax.random.normal(ks[1], (b, t, kv_heads, e))
    v = jax.random.normal(ks[2], (b, t, kv_heads, e))
    w = jax.random.normal(ks[3], (b, t, h, e))
    seg = jnp.array([[0] * 4 + [1] * 7, [2] * 6 + [5] * 3 + [6] * 2]) if packed else None
    idx = np.arange(t)
    mask = np.broadcast_to(idx[:, None] >= idx[None, :], (b, t, t))
    if packed:
        mask = mask & (seg[:, :, None] == seg[:, None, :])

    def fused(q, k, v):
        return jnp.sum(w * causal_attention(q, k, v, seg, block, groups))

    def full(q, k, v):
        return jnp.sum(w * softmax_attention(q, k, v, jnp.asarray(mask)))

    # jitted: one compile per form instead of one per operation (eager)
    fused_vg, full_vg = (jax.jit(jax.value_and_grad(f, (0, 1, 2))) for f in (fused, full))
    (y1, grads1), (y2, grads2) = fused_vg(q, k, v), full_vg(q, k, v)
    np.testing.assert_allclose(y1, y2, rtol=1e-5, atol=1e-5)
    for g1, g2 in zip(grads1, grads2):
        np.testing.assert_allclose(g1, g2, rtol=1e-4, atol=1e-5)


def test_causal_attention_documents_are_runs_of_one_id():
    """A document is a run of one segment id: an id that comes back after another one starts a new
    document that does not see the first run (the linear mixers reset their state the same way)."""
    b, t, h, e = 1, 9, 2, 8
    ks = jax.random.split(jax.random.key(12), 3)
    q, k, v = (jax.random.normal(kk, (b, t, h, e)) for kk in ks)
    seg = jnp.array([[7, 7, 7, 3, 3, 7, 7, 7, 7]])
    doc = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])  # runs
    np.testing.assert_array_equal(segment_starts(seg)[0], [0, 0, 0, 3, 3, 5, 5, 5, 5])
    idx = np.arange(t)
    mask = (idx[:, None] >= idx[None, :]) & (doc[:, None] == doc[None, :])
    for groups in ((1, 1), (1, 2)):
        np.testing.assert_allclose(causal_attention(q, k, v, seg, 4, groups),
                                   softmax_attention(q, k, v, jnp.asarray(mask[None])),
                                   rtol=1e-5, atol=1e-6)


def test_attention_groups_per_backend_and_mesh():
    """CPU: groups of about GROUP_LOGITS logits, batch rows first (llama-d256's step: one row of
    32 heads per group); TPU/GPU: one group; under a mesh the counts divide one device's share."""
    from jax.sharding import AbstractMesh

    assert llama.attention_groups(8, 32, 256, "cpu") == (8, 1)
    assert llama.attention_groups(8, 32, 256, "tpu") == (1, 1)
    assert llama.attention_groups(8, 4, 128, "cpu") == (1, 1)  # the study's t = 128: one group
    assert llama.attention_groups(1, 32, 2048, "cpu") == (1, 32)
    mesh = AbstractMesh((2, 1, 2), ("data", "fsdp", "tensor"))
    with jax.sharding.use_abstract_mesh(mesh):
        # 4 rows x 16 heads per device at t = 256: 2^22 logits, 2 groups of 2 rows
        assert llama.attention_groups(8, 32, 256, "cpu") == (2, 1)
        # 1 row x 6 heads per device at t = 1024: 3 x 2^21 logits, 3 groups of 2 heads
        assert llama.attention_groups(2, 12, 1024, "cpu") == (1, 3)


@pytest.mark.parametrize("lead,n_dots", [((2, 4), 3), ((8, 16), 1)])
def test_stacked_dense_is_the_separate_matmuls(lead, n_dots):
    """stacked_dense = n separate x @ W_i: values and the gradients of x and each W_i; one stacked
    matmul [d, n, f] from STACK_MIN_ROWS rows on (training), n matmuls below (a decode step,
    where stacking the kernels would cost more than the matmuls)."""
    assert (math.prod(lead) < STACK_MIN_ROWS) == (n_dots == 3)  # rows = b·t
    keys = KeyGen(jax.random.key(12))
    ws = [Linear(6, 5, keys=keys, std=1.0, axes=("embed", "heads")).kernel[...] for _ in range(3)]
    x = jax.random.normal(jax.random.key(13), (*lead, 6))
    w = jax.random.normal(jax.random.key(14), (*lead, 3, 5))
    jaxpr = str(jax.make_jaxpr(lambda x: stacked_dense(
        x, [types.SimpleNamespace(kernel=wi) for wi in ws]))(x))
    assert jaxpr.count("dot_general") == n_dots, jaxpr

    def fused(x, ws):  # stacked_dense reads lin.kernel[...]: plain arrays stand in for the Params
        return jnp.sum(w * stacked_dense(x, [types.SimpleNamespace(kernel=wi) for wi in ws]))

    def separate(x, ws):
        return sum(jnp.sum(w[..., i, :] * (x @ wi)) for i, wi in enumerate(ws))

    np.testing.assert_allclose(fused(x, ws), separate(x, ws), rtol=1e-5)
    for g1, g2 in zip(jax.tree.leaves(jax.grad(fused, (0, 1))(x, ws)),
                      jax.tree.leaves(jax.grad(separate, (0, 1))(x, ws))):
        np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lead", [(5,), (2, 4), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("d_in,d_out", [(6, 5), (5, 6)])  # dW as (dyᵀ x)ᵀ / as xᵀ dy
def test_dense_custom_vjp_is_plain_matmul(lead, dtype, d_in, d_out):
    """dense's own VJP (dW = xᵀ dy, or (dyᵀ x)ᵀ for a kernel wider at its input) = autodiff of
    jnp.dot: values, dx and dW, any leading dims, also in bfloat16 (cotangents keep the dtypes of x
    and w), under jit and under vmap."""
    x = jax.random.normal(jax.random.key(15), (*lead, d_in)).astype(dtype)
    w = jax.random.normal(jax.random.key(16), (d_in, d_out)).astype(dtype)
    r = jax.random.normal(jax.random.key(17), (*lead, d_out))

    def loss(f):
        return lambda x, w: jnp.sum(r * f(x, w).astype(jnp.float32) ** 2)

    tol = dict(rtol=1e-5, atol=1e-6) if dtype == jnp.float32 else dict(rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(np.asarray(dense(x, w), np.float32),
                               np.asarray(jnp.dot(x, w), np.float32), **tol)
    got = jax.jit(jax.grad(loss(dense), (0, 1)))(x, w)
    want = jax.grad(loss(jnp.dot), (0, 1))(x, w)
    for g1, g2 in zip(got, want):
        assert g1.dtype == g2.dtype == dtype
        np.testing.assert_allclose(np.asarray(g1, np.float32), np.asarray(g2, np.float32), **tol)
    per_row = jax.vmap(jax.grad(loss(dense), 1), in_axes=(0, None))(x, w)  # batched dW
    np.testing.assert_allclose(np.asarray(per_row, np.float32),
                               np.asarray(jax.vmap(jax.grad(loss(jnp.dot), 1), in_axes=(0, None))(x, w),
                                          np.float32), **tol)


@pytest.mark.parametrize("h", [3, 12])
def test_alibi_non_power_of_two_is_interleave(h):
    closest = 2 ** math.floor(math.log2(h))
    expect = [2 ** (-8 * (i + 1) / closest) for i in range(closest)]
    expect += [2 ** (-8 * (i + 1) / (2 * closest)) for i in range(0, 2 * closest, 2)][: h - closest]
    np.testing.assert_allclose(alibi_slopes(h), expect)
