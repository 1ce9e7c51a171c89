"""The short convolution of the linear mixers (model.short_conv): the depthwise convolution against a
naive loop and against its earlier unrolled form (values and gradients, documents, decode history),
a program that does not grow with the width, a width beyond the sequence refused in one line (the
config, a study plan, the trainer's command line), the three mixers with it under every impl,
packed documents, decoding (Decoder.extend and eval.generate) against the parallel forward, the
variant label, and its parameters, FLOPs and state in the accounting."""

import functools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from linscale_jax.config import ModelConfigError, base_config, check_model
from linscale_jax.models import ModelConfig, accounting, build_model, registry, sizes
from linscale_jax.models.linear_common import short_conv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LINEAR = ("tnl", "hgrn2", "cosformer2")
B, T, V, K = 2, 16, 40, 4


def naive_conv(z, w, pos, history=None):
    """y[b, t, c] = sum_s w[K-1-s, c] z[b, t-s, c] over taps s <= pos[b, t] (inside the document),
    inputs before t = 0 from the history."""
    z, w = np.asarray(z, np.float64), np.asarray(w, np.float64)
    b, t = z.shape[:2]
    width = w.shape[0]
    full = np.concatenate([np.zeros((b, width - 1) + z.shape[2:]) if history is None
                           else np.asarray(history, np.float64), z], 1)
    y = np.zeros_like(z)
    for i in range(b):
        for j in range(t):
            for s in range(width):
                if s <= pos[i, j]:
                    y[i, j] += w[width - 1 - s] * full[i, width - 1 + j - s]
    return y


def test_short_conv_matches_a_naive_loop_values_and_gradients():
    rng = np.random.default_rng(0)
    z = jnp.asarray(rng.normal(size=(2, 9, 3, 5)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(K, 3, 5)), jnp.float32)
    hist = jnp.asarray(rng.normal(size=(2, K - 1, 3, 5)), jnp.float32)
    arange = np.broadcast_to(np.arange(9), (2, 9))
    packed = np.array([np.arange(9), [0, 1, 0, 1, 2, 3, 4, 0, 1]])  # documents [0,2) [2,7) [7,9)
    decoding = arange + 5  # positions after 5 earlier tokens: the history's taps count
    for pos, h in ((arange, None), (packed, None), (decoding, hist)):
        y, new_hist = short_conv(z, w, jnp.asarray(pos), h)
        np.testing.assert_allclose(y, naive_conv(z, w, pos, h), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(new_hist, z[:, -(K - 1):])  # the last K-1 inputs
    # gradients: the naive form written in jnp (loops over taps and positions), packed documents
    cot = jnp.asarray(rng.normal(size=z.shape), jnp.float32)

    def loop_form(z, w):
        out = []
        for j in range(z.shape[1]):
            acc = jnp.zeros(z.shape[:1] + z.shape[2:])
            for s in range(K):
                if s <= packed[1, j]:
                    acc = acc + w[K - 1 - s] * z[:, j - s]
            out.append(acc)
        return jnp.sum(jnp.stack(out, 1) * cot)

    pos = jnp.asarray(np.repeat(packed[1:], 2, 0))
    want = jax.grad(loop_form, argnums=(0, 1))(z, w)
    got = jax.grad(lambda z, w: jnp.sum(short_conv(z, w, pos)[0] * cot), argnums=(0, 1))(z, w)
    for g, x in zip(got, want):
        np.testing.assert_allclose(g, x, rtol=1e-5, atol=1e-5)
    # bf16 inputs: summed in float32, returned in bf16
    y16, _ = short_conv(z.astype(jnp.bfloat16), w, jnp.asarray(arange))
    assert y16.dtype == jnp.bfloat16
    np.testing.assert_allclose(y16.astype(jnp.float32), naive_conv(z, w, arange), rtol=3e-2, atol=3e-2)


def unrolled_conv(z, kernel, positions, history=None):
    """The convolution as it was first written: one Python iteration per lagged tap (a program
    K - 1 taps long); the reference the scan form must equal."""
    width, t = kernel.shape[0], z.shape[1]
    dtype = jnp.promote_types(z.dtype, jnp.float32)
    if history is None:
        full = jnp.pad(z, ((0, 0), (width - 1, 0)) + ((0, 0),) * (z.ndim - 2))
    else:
        full = jnp.concatenate([history.astype(z.dtype), z], axis=1)
    w = kernel.astype(dtype)
    y = z.astype(dtype) * w[width - 1]
    for j in range(width - 1):
        lag = width - 1 - j
        inside = (positions >= lag).astype(dtype).reshape(positions.shape + (1,) * (z.ndim - 2))
        y = y + full[:, j:j + t].astype(dtype) * w[j] * inside
    return y.astype(z.dtype), full[:, t:].astype(jnp.float32)


@pytest.mark.parametrize("width", [1, 4, 7])
def test_scan_form_equals_the_unrolled_form_values_and_gradients(width):
    rng = np.random.default_rng(width)
    z = jnp.asarray(rng.normal(size=(2, 11, 3, 5)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(width, 3, 5)), jnp.float32)
    hist = jnp.asarray(rng.normal(size=(2, width - 1, 3, 5)), jnp.float32)
    packed = jnp.asarray([np.arange(11), [0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1]])
    cot = jnp.asarray(rng.normal(size=z.shape), jnp.float32)
    for h in (None, hist):
        pos = packed if h is None else packed + 9
        got, want = short_conv(z, w, pos, h), unrolled_conv(z, w, pos, h)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])
        args = (z, w) if h is None else (z, w, h)

        def loss(form, *a):
            return jnp.sum(form(a[0], a[1], pos, a[2] if len(a) > 2 else None)[0] * cot)

        g_got = jax.grad(functools.partial(loss, short_conv), argnums=tuple(range(len(args))))(*args)
        g_want = jax.grad(functools.partial(loss, unrolled_conv), argnums=tuple(range(len(args))))(*args)
        for a, b in zip(g_got, g_want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    y16 = short_conv(z.astype(jnp.bfloat16), w, packed)[0]
    assert y16.dtype == jnp.bfloat16
    np.testing.assert_array_equal(y16, unrolled_conv(z.astype(jnp.bfloat16), w, packed)[0])


def test_the_program_does_not_grow_with_the_width():
    """A 1000-tap convolution compiled a 999-step unrolled loop; the scan form's program (forward
    and gradient) has the same number of operations at every width."""
    def ops(width):
        z = jax.ShapeDtypeStruct((2, 1024, 3, 8), jnp.float32)
        w = jax.ShapeDtypeStruct((width, 3, 8), jnp.float32)
        pos = jax.ShapeDtypeStruct((2, 1024), jnp.int32)
        f = jax.grad(lambda z, w, p: jnp.sum(short_conv(z, w, p)[0]), argnums=(0, 1))
        return len(jax.make_jaxpr(f)(z, w, pos).jaxpr.eqns)

    assert ops(4) == ops(64) == ops(1000)


def test_a_convolution_wider_than_the_sequence_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"model.short_conv=65 is wider than the sequence \(model.max_seq_len=64\)"):
        ModelConfig(arch="tnl", max_seq_len=64, short_conv=65)
    config = base_config()
    sizes.apply_model(config.model, sizes.ladder_model("tnl+short_conv=1000", "d32"))
    config.train.seq_len = 128
    with pytest.raises(ModelConfigError, match=r"^model.short_conv=1000 is wider than the sequence "
                                               r"\(train.seq_len=128\).*short_conv=4\)\.$"):
        check_model(config)
    config.model.short_conv = 128
    assert check_model(config).short_conv == 128  # as wide as the sequence: accepted
    # the trainer's command line: one line, rc 1, before the workdir exists (~10 s)
    work = tmp_path / "w"
    p = subprocess.run([sys.executable, "-m", "linscale_jax.train", "--config=configs/tiny.py:tnl-d32",
                        "--config.model.short_conv=1000", f"--workdir={work}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT))
    err = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 1 and len(err) == 1, p.stderr[-2000:]
    assert err[0].startswith("ERROR: model.short_conv=1000 is wider than the sequence (train.seq_len=128)")
    assert not work.exists()


def test_a_study_plan_with_a_convolution_wider_than_the_sequence_is_refused():
    from linscale_jax.study import presets
    from linscale_jax.study.scaling import plan

    study = presets.preset("quick")
    study.archs = "tnl+short_conv=1000"
    with pytest.raises(ModelConfigError, match=r"^tnl\+short_conv=1000-d\w+: model.short_conv=1000 is wider"):
        plan.build_plan(study, "/nonexistent/study")


def tiny(arch, **kw):
    base = dict(arch=arch, n_layers=2, d_model=32, n_heads=2, ffn_dim=64, vocab_size=V, max_seq_len=64,
                impl="xla", chunk_size=8, init_std=0.05, short_conv=K)
    return ModelConfig(**{**base, **kw})


@functools.lru_cache(maxsize=None)
def model_of(arch, **kw):
    return build_model(tiny(arch, **kw), nnx.Rngs(0))


_fwd = nnx.jit(lambda m, t, s: m(t, s))
_extend = nnx.jit(lambda m, t, state: m.extend(t, state))


def tokens(seed, shape=(B, T)):
    return jax.random.randint(jax.random.key(seed), shape, 0, V, dtype=jnp.int32)


@pytest.mark.parametrize("arch", LINEAR)
def test_mixers_with_the_conv_decode_step_by_step_and_keep_documents_apart(arch):
    model, toks = model_of(arch), tokens(1)
    ones = jnp.ones((B, T), jnp.int32)
    full = _fwd(model, toks, ones)
    without = build_model(tiny(arch, short_conv=0), nnx.Rngs(0))
    assert float(jnp.abs(full - _fwd(without, toks, ones)).max()) > 1e-3  # the conv is in the path
    # prefill 5 tokens (conv history crosses the prefill edge), then one-token steps
    state = model.init_state(B)
    assert state["layers"][0]["conv"].shape == (B, K - 1, 3, 32)
    out, state = _extend(model, toks[:, :5], state)
    outs = [out]
    for i in range(5, T):
        step, state = _extend(model, toks[:, i:i + 1], state)
        outs.append(step)
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full, atol=2e-5, rtol=1e-5)
    # packed: documents [0, 6) and [6, 16) == each document alone (no tap across the boundary)
    packed = _fwd(model, toks, jnp.asarray([[1] * 6 + [2] * 10] * B, jnp.int32))
    alone = _fwd(model, jnp.concatenate([toks[:, 6:], toks[:, :6]], 1),
                 jnp.asarray([[1] * 10 + [2] * 6] * B, jnp.int32))
    np.testing.assert_allclose(packed[:, 6:], alone[:, :10], atol=2e-5, rtol=1e-5)


def test_every_impl_gives_the_same_values_and_gradients():
    """reference, xla and (TNL) pallas in interpret mode on CPU: the conv is plain jnp before the
    kernel, whose impls are compared on their own in tests/kernels."""
    toks = tokens(3)
    for arch in LINEAR:
        res = {}
        for impl in ("reference", "xla") + (("pallas",) if arch == "tnl" else ()):
            m = model_of(arch, impl=impl, n_layers=1)
            loss, grads = nnx.jit(nnx.value_and_grad(lambda m, t: jnp.mean(m(t) ** 2)))(m, toks)
            res[impl] = (loss, nnx.to_pure_dict(nnx.state(grads, nnx.Param)))
        for impl in set(res) - {"reference"}:
            np.testing.assert_allclose(res[impl][0], res["reference"][0], rtol=2e-5)
            conv = [k for k in jax.tree_util.tree_flatten_with_path(res[impl][1])[0]
                    if "conv" in jax.tree_util.keystr(k[0])]
            assert conv, "no conv gradient"
            for (path, g), want in zip(jax.tree_util.tree_flatten_with_path(res[impl][1])[0],
                                       jax.tree.leaves(res["reference"][1])):
                err = float(jnp.abs(g - want).max() / (jnp.abs(want).max() + 1e-12))
                assert err < 1e-3, (arch, impl, jax.tree_util.keystr(path), err)


def test_generator_prefill_equals_the_parallel_forward():
    from linscale_jax.eval.generate import Generator

    model, toks = model_of("hgrn2", scan_layers=True), tokens(4, (B, 17))
    gen = Generator(model, chunk_size=16, min_chunk=4)
    logits, _ = gen.prefill(toks)  # chunks 16, 1
    np.testing.assert_allclose(logits, _fwd(model, toks, jnp.ones(toks.shape, jnp.int32)),
                               atol=2e-5, rtol=1e-5)
    out = gen.generate(toks[:, :8], max_new_tokens=3)  # greedy: each token the forward's argmax
    seq = jnp.concatenate([toks[:, :8], jnp.asarray(out[:, :2])], 1)
    want = jnp.argmax(_fwd(model, seq, jnp.ones(seq.shape, jnp.int32))[:, 7:], -1)
    np.testing.assert_array_equal(out, want)


def test_variant_label_validation_and_the_paper_configs_keep_it_off():
    arch, changes = sizes.split_variant("tnl+short_conv=4")
    assert (arch, changes) == ("tnl", {"short_conv": 4})
    assert sizes.ladder_model("hgrn2+short_conv=4", "d32")["short_conv"] == 4
    assert all(sizes.paper_model(a, s).get("short_conv", 0) == 0 for a in registry.ARCHS for s in sizes.PAPER_SIZES)
    with pytest.raises(ValueError, match="short_conv applies to the linear mixers"):
        ModelConfig(arch="llama", short_conv=4)
    with pytest.raises(ValueError, match="short_conv=-1 must be an integer >= 0"):
        ModelConfig(arch="tnl", short_conv=-1)


@pytest.mark.parametrize("arch", LINEAR)
def test_conv_parameters_flops_and_state_are_counted(arch):
    on, off = tiny(arch), tiny(arch, short_conv=0)
    l, d = on.n_layers, on.d_model
    assert (accounting.param_counts(on)["non_embedding"] - accounting.param_counts(off)["non_embedding"]
            == l * K * 3 * d)
    assert accounting.paper_params(on) - accounting.paper_params(off) == l * K * 3 * d
    assert (accounting.forward_flops_per_token(on, T) - accounting.forward_flops_per_token(off, T)
            == l * 2 * K * 3 * d)
    assert accounting.paper_flops_per_token(on, T) - accounting.paper_flops_per_token(off, T) == pytest.approx(
        6 * l * K * 3 * d)
    spec = registry.get(arch)
    assert spec.state_floats(on, T) == registry.cache_floats(on, T) == spec.state_floats(off, T) + (K - 1) * 3 * d
