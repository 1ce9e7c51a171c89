"""Gated DeltaNet (`gdn`): the mixer against its formulas written in numpy (float64, from the paper and
fla's layer, not from the code), its options (value expansion, convolution width) in the parameter
tree, the accounting and the decoding state, its initialisation, the ladder entry, and the refusals.
The generic model tests (causality, packing, decoding, bf16, overfitting, scan_layers, dead
parameters, XLA's FLOP count, eval's generator) cover it through the registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from linscale_jax.config import ModelConfigError, base_config, check_model
from linscale_jax.models import ModelConfig, accounting, build_model, registry, sizes
from linscale_jax.models.gdn import GatedDeltaNet
from linscale_jax.models.layers import KeyGen

D, H, T = 16, 2, 9
E = D // H


def cfg(**kw):
    base = dict(arch="gdn", n_layers=2, d_model=D, n_heads=H, ffn_dim=32, vocab_size=16, max_seq_len=64,
                impl="reference", init_std=0.3)
    return ModelConfig(**{**base, **kw})


def np_(x):
    return np.asarray(x, np.float64)


def silu(x):
    return x / (1 + np.exp(-x))


def reference(m, x, r, width, eps):
    """The layer in float64: projections, causal depthwise convolution + SiLU, L2-normalised q (scaled
    by e^-1/2) and k, β = sigmoid, g = −exp(A_log)·softplus(· + dt_bias), the gated delta rule
    S_t = exp(g_t)(I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ, o_t = S_tᵀ q_t, the gated RMSNorm, W_o."""
    X = np_(x[0])
    z = np.concatenate([X @ np_(lin.kernel[...]) for lin in (m.wq, m.wk, m.wv)], axis=-1)
    if width:
        w = np_(m.conv[...])  # [K, C]: tap K-1 is the current token
        z = np.stack([sum(w[width - 1 - s] * z[t - s] for s in range(width) if t - s >= 0)
                      for t in range(T)])
    z = silu(z)
    q, k, v = z[:, :D].reshape(T, H, E), z[:, D:2 * D].reshape(T, H, E), z[:, 2 * D:].reshape(T, H, r * E)
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * E ** -0.5
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    beta = 1 / (1 + np.exp(-(X @ np_(m.wb.kernel[...]))))
    g = -np.exp(np_(m.a_log[...])) * np.log1p(np.exp(X @ np_(m.wa.kernel[...]) + np_(m.dt_bias[...])))
    o = np.zeros((T, H, r * E))
    for i in range(H):
        s = np.zeros((E, r * E))
        for t in range(T):
            kk = k[t, i][:, None]
            s = np.exp(g[t, i]) * (s - beta[t, i] * kk @ (kk.T @ s)) + beta[t, i] * kk @ v[t, i][None]
            o[t, i] = s.T @ q[t, i]
    gate = silu(X @ np_(m.wg.kernel[...])).reshape(T, H, r * E)
    o = o / np.sqrt((o * o).mean(-1, keepdims=True) + eps) * np_(m.norm_scale[...]) * gate
    return o.reshape(T, -1) @ np_(m.wo.kernel[...])


@pytest.mark.parametrize("r,width", [(2, 4), (1, 0), (3, 2)])
def test_mixer_matches_the_formulas(r, width):
    c = cfg(gdn=dict(expand_v=r, conv_size=width))
    m = GatedDeltaNet(c, keys=KeyGen(jax.random.key(r)))
    x = jax.random.normal(jax.random.key(7), (1, T, D), jnp.float32)
    y, _ = nnx.jit(lambda m, x: m(x, positions=jnp.arange(T)[None], segment_ids=None, cache=None,
                                  extra=None))(m, x)
    np.testing.assert_allclose(y[0], reference(m, x, r, width, c.out_norm_eps), rtol=2e-4, atol=2e-5)
    # the chunked form (xla, chunks of 4 over 9 tokens) equals the token scan, values and gradients
    mx = GatedDeltaNet(c.replace(impl="xla", chunk_size=4), keys=KeyGen(jax.random.key(r)))
    pos = jnp.arange(T)[None]

    @nnx.jit
    def value_and_grad(m):
        return nnx.value_and_grad(lambda m: jnp.sum(jnp.sin(
            m(x, positions=pos, segment_ids=None, cache=None, extra=None)[0])))(m)

    (lr, gr), (lx, gx) = (value_and_grad(mm) for mm in (m, mx))
    np.testing.assert_allclose(lx, lr, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(nnx.state(gx, nnx.Param)), jax.tree.leaves(nnx.state(gr, nnx.Param))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(jnp.abs(b).max()))


def test_initialisation_as_fla():
    m = build_model(cfg(n_heads=16, d_model=256), nnx.Rngs(0)).layers[0].mixer
    a = np.exp(np_(m.a_log[...]))
    dt = np.log1p(np.exp(np_(m.dt_bias[...])))  # softplus(dt_bias)
    assert 0 < a.min() and a.max() < 16 and np.ptp(a) > 4
    assert 1e-4 <= dt.min() and dt.max() <= 0.1 + 1e-6 and dt.max() / dt.min() > 3
    assert np.abs(np_(m.conv[...])).max() <= 0.5 and np.all(np_(m.norm_scale[...]) == 1)


@pytest.mark.parametrize("r,width", [(2, 4), (1, 4), (2, 0)])
def test_parameters_state_and_flops_are_counted(r, width):
    c = cfg(d_model=32, n_heads=4, gdn=dict(expand_v=r, conv_size=width))
    d, h, e, g, l = 32, 4, 8, 32, 2
    mixer = 2 * d * d + 3 * r * d * d + 2 * d * h + 2 * h + width * (2 + r) * d + r * e
    assert accounting.param_counts(c)["non_embedding"] == l * (mixer + 3 * d * g)
    assert accounting.paper_params(c) == l * (12 * d * d + (3 * r - 2) * d * d + 2 * d * h + width * (2 + r) * d)
    state = h * e * r * e + max(width - 1, 0) * (2 + r) * d
    assert registry.get("gdn").state_floats(c, 20) == registry.cache_floats(c, 20) == state
    assert accounting.state_floats_per_layer(c, 20) == state and accounting.kv_cache_bytes_per_token(c) == 0
    # exact FLOPs: beyond the shared 2·4d² + 2·3dg, the projections, W_a / W_β, the convolution and
    # the chunked delta rule at chunk 8 (matmuls of the WY form)
    n, chunk, v = 20, 8, r * e
    rule = h * 2 * (3 * chunk * chunk * e + 2 * chunk * chunk * v + 3 * chunk * e * v + 8 * 63 / 3) / chunk
    layer = 2 * 4 * d * d + 2 * 3 * d * g + 2 * (3 * r - 2) * d * d + 4 * d * h + 2 * width * (2 + r) * d + rule
    got = accounting.forward_flops_per_token(c.replace(chunk_size=chunk, impl="xla"), n)
    assert got == pytest.approx(l * layer + 2 * d * 16)


def test_ladder_entry_keeps_the_structure():
    for name in ("d32", "d64", "d128"):
        c = ModelConfig(**sizes.ladder_model("gdn", name))
        d = sizes.LADDER[name][1]
        assert (c.n_heads, c.head_dim, c.gdn.expand_v, c.gdn.conv_size) == (d // 16, 16, 2, 4)
        assert registry.get("gdn").state_floats(c, 128) == (d // 16) * 16 * 32 + 3 * 4 * d
    m = build_model(ModelConfig(**sizes.ladder_model("gdn", "d64")), nnx.Rngs(0)).layers[0].mixer
    assert m.wv.kernel.shape == (64, 128) and m.norm_scale.shape == (32,) and m.conv.shape == (4, 256)
    # a state-size variant at the same width: fewer, wider heads (the study's state axis)
    wide = ModelConfig(**sizes.ladder_model("gdn+n_heads=2", "d64"))
    assert registry.get("gdn").state_floats(wide, 128) == 2 * 32 * 64 + 3 * 4 * 64


def test_refusals_are_one_line():
    with pytest.raises(ValueError, match=r"model.short_conv=4: gdn has its own convolution on q, k, v "
                                         r"\(model.gdn.conv_size=4\)"):
        cfg(short_conv=4)
    with pytest.raises(ValueError, match=r"model.gdn.expand_v=0 must be >= 1"):
        cfg(gdn=dict(expand_v=0))
    config = base_config()
    sizes.apply_model(config.model, sizes.ladder_model("gdn+conv_size=200", "d32"))
    config.train.seq_len = 128
    with pytest.raises(ModelConfigError, match=r"^model.gdn.conv_size=200 is wider than the sequence "
                                               r"\(train.seq_len=128\)"):
        check_model(config)
