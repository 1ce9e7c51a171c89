"""The four architectures: causality, prefill + steps == parallel, packing, bf16, overfitting, errors.

Tiny shapes (l=2, d=32, h=2, t=16) and module-level jitted functions shared across tests so each
(arch, impl) model compiles a handful of times only.
"""

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from linscale_jax.config import ARCHS
from linscale_jax.models import ModelConfig, build_model

HAS_XLA = os.path.exists(
    os.path.join(os.path.dirname(__file__), "..", "..", "kernels_pallas", "linear_attention", "xla.py")
)
IMPL = "xla" if HAS_XLA else "reference"  # the chunked form; test_models_arch covers "reference"
B, T, V = 2, 16, 48


def tiny_cfg(arch, **kw):
    base = dict(arch=arch, n_layers=2, d_model=32, n_heads=2, ffn_dim=64, vocab_size=V,
                max_seq_len=64, impl=IMPL, chunk_size=8, init_std=0.05)
    base.update(kw)
    return ModelConfig(**base)


@functools.lru_cache(maxsize=None)
def tiny_model(arch, dtype="float32"):
    return build_model(tiny_cfg(arch, dtype=dtype), nnx.Rngs(0))


_fwd = nnx.jit(lambda m, tokens: m(tokens))
_fwd_seg = nnx.jit(lambda m, tokens, seg: m(tokens, seg))
_extend = nnx.jit(lambda m, tokens, state: m.extend(tokens, state))


def tokens_for(seed=1, shape=(B, T)):
    return jax.random.randint(jax.random.key(seed), shape, 0, V, dtype=jnp.int32)


@pytest.mark.parametrize("arch", ARCHS)
def test_causal_and_packed_segments(arch):
    model = tiny_model(arch)
    toks = tokens_for()
    ones = jnp.ones((B, T), jnp.int32)
    base = _fwd_seg(model, toks, ones)
    assert base.shape == (B, T, V) and base.dtype == jnp.float32
    # segment ids present: the decay becomes the data-dependent kind (other xla path) -> fp32 tolerance
    np.testing.assert_allclose(base, _fwd(model, toks), atol=1e-5, rtol=1e-5)

    # Causality: changing token 10 leaves logits 0..9 unchanged and changes 10..
    changed = toks.at[:, 10].set((toks[:, 10] + 1) % V)
    other = _fwd_seg(model, changed, ones)
    np.testing.assert_array_equal(np.asarray(base[:, :10]), np.asarray(other[:, :10]))
    assert float(jnp.abs(base[:, 10:] - other[:, 10:]).max()) > 1e-4

    # Packing: documents [0, 6) and [6, 16) in one row == each document alone.
    packed_seg = jnp.asarray([[1] * 6 + [2] * 10] * B, jnp.int32)
    packed = _fwd_seg(model, toks, packed_seg)
    doc2_alone = jnp.concatenate([toks[:, 6:], toks[:, :6]], axis=1)  # doc 2 first, junk after
    alone = _fwd_seg(model, doc2_alone, jnp.asarray([[1] * 10 + [2] * 6] * B, jnp.int32))
    np.testing.assert_allclose(packed[:, 6:], alone[:, :10], atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(packed[:, :6], base[:, :6], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_and_steps_match_parallel(arch):
    # prefill runs the chunked form (chunk 8, so 9 tokens cross a chunk), steps the recurrence
    model = tiny_model(arch)
    toks = tokens_for(2)
    full = _fwd(model, toks)
    state = model.init_state(B, 32)
    pre, state = _extend(model, toks[:, :9], state)
    outs = [pre]
    for i in range(9, T):
        step, state = _extend(model, toks[:, i : i + 1], state)
        outs.append(step)
    assert int(state["pos"]) == T
    np.testing.assert_allclose(jnp.concatenate(outs, axis=1), full, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_close_to_fp32(arch):
    toks = tokens_for(3)
    ref = _fwd(tiny_model(arch), toks)
    low = _fwd(tiny_model(arch, dtype="bfloat16"), toks)
    assert low.dtype == jnp.float32
    # same parameters (same seed); bf16 matmuls, fp32 norms/state: logits agree to bf16 precision
    err = float(jnp.abs(low - ref).max()) / float(jnp.abs(ref).max())
    assert err < 0.06, err  # cosFormer2's TPE state is carried in bf16 here: 0.054 (tied TPE, seed 0)
    p_ref, p_low = jax.nn.softmax(ref), jax.nn.softmax(low)
    assert float(jnp.abs(p_ref - p_low).max()) < 0.01


@pytest.mark.parametrize("arch", ARCHS)
def test_overfits_single_batch(arch):
    remat = "block" if arch == "tnl" else "none"
    model = build_model(tiny_cfg(arch, remat=remat, impl="reference"), nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    toks = tokens_for(4, (4, T + 1))

    @nnx.jit
    def step(model, opt, toks):
        def loss_fn(m):
            logits = m(toks[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, toks[:, 1:]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss

    losses = [float(step(model, opt, toks)) for _ in range(40)]
    assert np.isfinite(losses).all()
    assert losses[-1] < losses[0] / 5, (losses[0], losses[-1])


@pytest.mark.parametrize("arch", ARCHS)
def test_scan_layers_matches_loop(arch):
    toks = tokens_for(6)
    scanned = build_model(tiny_cfg(arch, scan_layers=True, remat="dots"), nnx.Rngs(0))
    np.testing.assert_allclose(_fwd(scanned, toks), _fwd(tiny_model(arch), toks), atol=1e-6, rtol=1e-6)
    if arch == "hgrn2":  # gradients through lax.scan + checkpoint equal the unrolled ones
        grad = nnx.jit(nnx.grad(lambda m: m(toks).std()))
        g_scan = grad(build_model(tiny_cfg(arch, scan_layers=True, remat="dots", impl="reference"),
                                  nnx.Rngs(0)))
        g_loop = grad(build_model(tiny_cfg(arch, impl="reference"), nnx.Rngs(0)))
        np.testing.assert_allclose(g_scan.layers.mixer.wf.kernel[...][1],
                                   g_loop.layers[1].mixer.wf.kernel[...], atol=1e-6, rtol=1e-4)
        g_gamma = np.asarray(g_scan.lower_bounds[...])  # Γ gets finite, non-zero gradients
        assert np.isfinite(g_gamma).all() and np.abs(g_gamma).max() > 0
        np.testing.assert_allclose(g_gamma, g_loop.lower_bounds[...], atol=1e-7, rtol=1e-4)
    if arch == "llama":  # stacked KV caches
        state = scanned.init_state(B, T)
        pre, state = _extend(scanned, toks[:, :12], state)
        step, state = _extend(scanned, toks[:, 12:13], state)
        full = _fwd(scanned, toks)
        np.testing.assert_allclose(jnp.concatenate([pre, step], 1), full[:, :13], atol=2e-5, rtol=1e-5)


# --- errors ---------------------------------------------------------------------------------------


def test_config_errors_name_the_fix():
    with pytest.raises(ValueError, match=r"arch.*llama.*tnl.*hgrn2.*cosformer2"):
        tiny_cfg("mamba")
    with pytest.raises(ValueError, match=r"not divisible by model.n_heads.*Set n_heads"):
        tiny_cfg("tnl", n_heads=3)
    with pytest.raises(ValueError, match="unknown field"):
        ModelConfig.from_config({"arch": "tnl", "d_modle": 64})
    with pytest.raises(ValueError, match="bfloat16"):
        tiny_cfg("tnl", dtype="fp8")
    with pytest.raises(ValueError, match="remat"):
        tiny_cfg("tnl", remat="all")
    with pytest.raises(ValueError, match="model.llama.n_kv_heads=3 must divide"):
        tiny_cfg("llama", n_heads=4, llama=dict(n_kv_heads=3))
    with pytest.raises(ValueError, match=r"model.tnl.gate='sigmoid' is not supported; choose one of"):
        tiny_cfg("tnl", tnl=dict(gate="sigmoid"))


def test_input_errors_name_the_fix():
    model = tiny_model("tnl")
    with pytest.raises(ValueError, match="max_seq_len"):
        model(jnp.zeros((1, 65), jnp.int32))
    with pytest.raises(TypeError, match=r"astype\(jnp.int32\)"):
        model(jnp.zeros((1, 4), jnp.float32))
    with pytest.raises(ValueError, match=r"tokens\[None\]"):
        model(jnp.zeros((4,), jnp.int32))
    with pytest.raises(ValueError, match="segment_ids"):
        model(jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 5), jnp.int32))
    llama = tiny_model("llama")
    state = llama.init_state(1, 8)
    with pytest.raises(ValueError, match="larger max_len"):
        llama.extend(jnp.zeros((1, 9), jnp.int32), state)
    with pytest.raises(ValueError, match="max_seq_len"):
        llama.init_state(1, 65)
