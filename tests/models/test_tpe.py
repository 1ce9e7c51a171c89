"""cosFormer2's LightNet TPE (linscale_jax.models.tpe): the parallel scan equals the sequential
reference (values and gradients), packed documents reset the state, a chunked run carried through
the state equals one pass, and the xmixers variant stays selectable."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from linscale_jax.models import ModelConfig, build_model
from linscale_jax.models.tpe import diagonal_recurrence, tpe_log_rate_init

B, T, E = 2, 37, 8
_forward = nnx.jit(lambda m, tokens: m(tokens))
_extend = nnx.jit(lambda m, tokens, state: m.extend(tokens, state))
_recurrence = jax.jit(diagonal_recurrence, static_argnums=4)  # (u, log_decay, seg, state, impl)


def inputs(seed=0):
    k1, k2 = jax.random.split(jax.random.key(seed))
    u = jax.random.normal(k1, (B, T, E), jnp.float32)
    log_decay = -jnp.exp(jnp.asarray(tpe_log_rate_init(E)))
    return u, log_decay


def naive(u, lam, seg=None):
    u, lam = np.asarray(u, np.float64), np.asarray(lam, np.float64)
    s = np.zeros_like(u)
    for b in range(u.shape[0]):
        acc = np.zeros(u.shape[2])
        for t in range(u.shape[1]):
            reset = seg is not None and t > 0 and seg[b, t] != seg[b, t - 1]
            acc = (0.0 if reset else lam) * acc + u[b, t]
            s[b, t] = acc
    return s


def test_rates_init_span_short_and_long_memories():
    lam = np.exp(-np.exp(tpe_log_rate_init(8).astype(np.float64)))
    mem = 1 / (1 - lam)
    assert mem.min() < 3 and mem.max() > 250 and np.all(np.diff(mem) > 0)


@pytest.mark.parametrize("impl", ["reference", "scan"])
def test_recurrence_matches_naive_with_segment_resets(impl):
    u, log_decay = inputs()
    seg = np.array([[1] * 10 + [2] * 20 + [3] * 7, [1] * T])
    s, last = _recurrence(u, log_decay, jnp.asarray(seg), None, impl)
    ref = naive(u, np.exp(np.asarray(log_decay)), seg)
    np.testing.assert_allclose(s, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(last, ref[:, -1], rtol=1e-5, atol=1e-5)


def test_scan_gradients_match_reference():
    u, log_decay = inputs(1)
    seg = jnp.asarray([[1] * 20 + [2] * 17] * B)
    w = jax.random.normal(jax.random.key(5), (B, T, E))

    def f(impl):
        return lambda u, ld: jnp.sum(w * diagonal_recurrence(u, ld, seg, None, impl)[0])

    gs = jax.jit(jax.grad(f("scan"), argnums=(0, 1)))(u, log_decay)
    gr = jax.jit(jax.grad(f("reference"), argnums=(0, 1)))(u, log_decay)
    for a, b in zip(gs, gr):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_chunks_carried_through_the_state_equal_one_pass():
    u, log_decay = inputs(2)
    full, _ = _recurrence(u, log_decay, None, None, "scan")
    state, parts = jnp.zeros((B, E)), []
    for a, b in [(0, 9), (9, 10), (10, T)]:
        s, state = _recurrence(u[:, a:b], log_decay, None, state, "scan")
        parts.append(s)
    np.testing.assert_allclose(jnp.concatenate(parts, 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tpe", ["lightnet", "lightnet_untied", "xmixers", "none"])
def test_cosformer2_tpe_variants_prefill_and_steps(tpe):
    cfg = ModelConfig(arch="cosformer2", n_layers=1, d_model=16, n_heads=4, ffn_dim=48, vocab_size=32,
                      max_seq_len=64, cosformer2=dict(tpe=tpe), impl="xla", chunk_size=8)
    model = build_model(cfg, nnx.Rngs(0))
    params = nnx.state(model, nnx.Param)
    assert ("tpe" in params) == (tpe != "none")
    toks = jax.random.randint(jax.random.key(3), (B, 12), 0, 32)
    full = _forward(model, toks)
    state = model.init_state(B, 16)
    pre, state = _extend(model, toks[:, :9], state)
    outs = [pre]
    for i in range(9, 12):
        step, state = _extend(model, toks[:, i:i + 1], state)
        outs.append(step)
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full, rtol=1e-5, atol=2e-5)
