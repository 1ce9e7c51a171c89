"""Decoding with the KV cache / recurrent state equals greedy decoding by repeated full forwards."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from linscale_jax.eval.generate import Generator, chunk_sizes, sample_logits
from linscale_jax.config import ARCHS
from linscale_jax.models import ModelConfig, build_model


def tiny_model(arch, seed=0, max_seq_len=64):
    cfg = ModelConfig(arch=arch, n_layers=2, d_model=32, n_heads=2, ffn_dim=64, vocab_size=64,
                      max_seq_len=max_seq_len, init_std=0.2, chunk_size=8)
    return build_model(cfg, rngs=nnx.Rngs(seed))


def greedy_by_full_forward(model, prompt, n):
    """Re-run the whole sequence for every new token. The buffer is right-padded to one fixed length
    (one compile); a causal model's logits at position i do not depend on later positions."""
    b, t = prompt.shape
    seq = np.zeros((b, t + n), np.int32)
    seq[:, :t] = prompt
    forward = nnx.jit(lambda m, x: m(x))
    for i in range(t, t + n):
        logits = forward(model, jnp.asarray(seq))
        first = logits[:, :t] if i == t else first
        seq[:, i] = np.asarray(jnp.argmax(logits[:, i - 1], axis=-1))
    return seq[:, t:], first


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_greedy_equals_full_forward(arch):
    model = tiny_model(arch)
    prompt = np.random.default_rng(1).integers(0, 64, size=(2, 12)).astype(np.int32)
    gen = Generator(model, chunk_size=4)  # prefill in 3 chunks: the state is carried across them
    logits, _ = gen.prefill(prompt, max_len=12 + 6)  # the state generate() below uses
    want, want_logits = greedy_by_full_forward(model, prompt, 7)
    np.testing.assert_allclose(logits, want_logits, atol=2e-4, rtol=2e-4)
    np.testing.assert_array_equal(gen.generate(prompt, max_new_tokens=7), want)


def test_stop_and_length_errors():
    model = tiny_model("tnl")
    gen = Generator(model, chunk_size=8)
    prompt = np.zeros((1, 5), np.int32)
    first = gen.generate(prompt, 4)
    # top-k = 1 sampling is greedy whatever the temperature
    np.testing.assert_array_equal(gen.generate(prompt, 4, temperature=1.3, top_k=1, seed=3), first)
    stopped = gen.generate(prompt, 10, stop_id=int(first[0, 0]))
    assert stopped.shape == (1, 1)
    llama = Generator(tiny_model("llama"), chunk_size=8)  # the KV cache keeps its limit
    with pytest.raises(ValueError, match="max_seq_len"):
        llama.generate(np.zeros((1, 60), np.int32), 10)
    state = llama.model.init_state(1, 64)
    with pytest.raises(ValueError, match="KV cache"):
        llama.model.extend(jnp.zeros((1, 65), jnp.int32), state)


@pytest.mark.parametrize("arch", ["tnl", "hgrn2", "cosformer2"])
def test_linear_models_decode_past_max_seq_len(arch):
    """The O(1) state (and LRPE positions) continue past model.max_seq_len = 16: 12 prompt + 13 new
    tokens equal greedy decoding by full forwards of the same parameters (max_seq_len = 64)."""
    short = tiny_model(arch, max_seq_len=16)
    want, _ = greedy_by_full_forward(tiny_model(arch), np.ones((1, 12), np.int32), 14)
    got = Generator(short, chunk_size=8).generate(np.ones((1, 12), np.int32), max_new_tokens=14)
    np.testing.assert_array_equal(got, want)


def test_chunk_sizes():
    assert chunk_sizes(11, 4, min_chunk=1) == [4, 4, 2, 1]
    assert chunk_sizes(8, 8) == [8]
    assert chunk_sizes(13, 64) == [1] * 13
    assert chunk_sizes(252, 128) == [128, 64, 32, 16] + [1] * 12


def test_sampling_filters():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    rows = jnp.broadcast_to(logits, (200, 4))  # 200 independent draws in one call
    key = jax.random.PRNGKey(0)
    draw = lambda **kw: np.asarray(sample_logits(rows, key, 1.0, **kw))
    assert set(draw(top_k=2)) == {0, 1}
    assert set(draw(top_p=0.75)) == {0, 1}  # 0.5 + 0.3 covers 0.75; index 2 starts above it
    assert set(draw(top_p=0.4)) == {0}
    assert int(sample_logits(logits, key)[0]) == 0  # temperature 0: argmax
    freq = np.bincount(draw(), minlength=4) / 200
    assert freq[0] > freq[2] and freq[1] > freq[3]
