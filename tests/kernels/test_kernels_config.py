"""The per-backend defaults live in one place (kernels_pallas.linear_attention.config) and are what
`linear_attention(..., chunk_size=None)` uses; the decay kind is resolved by name; bad segment ids
get a clear error. Legend: b batch, t sequence, h heads, k key dim, v value dim."""

import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas import DecayKind, default_chunk_size, linear_attention
from kernels_pallas.linear_attention import config


def test_default_chunk_size_per_backend():
    """The documented defaults, written out (not read back from the table they come from)."""
    assert default_chunk_size("pallas", "tpu") == config.DEFAULTS["tpu"].chunk_size == 128
    assert default_chunk_size("xla", "cpu") == 16
    assert default_chunk_size("xla", "tpu") == 128
    assert default_chunk_size("xla", "gpu") == 64
    # CPU: the key head dim, rounded up to a power of two, clamped to [16, 64]; other backends fixed
    for key_dim, chunk in ((4, 16), (8, 16), (20, 32), (32, 32), (64, 64), (128, 64), (256, 64)):
        assert default_chunk_size("xla", "cpu", key_dim=key_dim) == chunk, key_dim
    assert default_chunk_size("xla", "tpu", key_dim=8) == 128
    assert default_chunk_size("xla", "gpu", key_dim=256) == 64
    assert default_chunk_size("pallas", "tpu", key_dim=8) == 128
    assert config.xla_block_len(64, "cpu") % 64 == 0
    assert config.xla_block_len(64, "tpu") is None


@pytest.mark.parametrize("key_dim,chunk", [(4, 16), (64, 64)])
def test_chunk_size_none_is_the_backend_default(key_dim, chunk, xla_chunk_sizes):
    """chunk_size=None on CPU runs the xla form with the chunk written here (16 at k = 4, 64 at
    k = 64): the chunk the form receives is recorded, its output is bit-equal to an explicit call
    with that chunk, and a call with another chunk (32) rounds differently, so a wrong default
    would show in the output as well as in the recorded chunk."""
    used = xla_chunk_sizes
    rng = np.random.default_rng(0)
    q, k = (jnp.asarray(0.3 * rng.standard_normal((1, 150, 2, key_dim)), jnp.float32) for _ in range(2))
    v = jnp.asarray(rng.standard_normal((1, 150, 2, 4)), jnp.float32)
    ld = jnp.array([-0.1, -1.0])
    got = np.asarray(linear_attention(q, k, v, log_decay=ld, impl="xla"))
    assert used == [chunk]
    want = np.asarray(linear_attention(q, k, v, log_decay=ld, impl="xla", chunk_size=chunk))
    other = np.asarray(linear_attention(q, k, v, log_decay=ld, impl="xla", chunk_size=32))
    assert used == [chunk, chunk, 32]
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, other)
    np.testing.assert_allclose(got, other, rtol=1e-4, atol=1e-4)


def test_decay_kind_by_name():
    assert DecayKind.of(None) is DecayKind.NONE == "none"
    assert DecayKind.of(jnp.zeros((3,))) is DecayKind.HEAD
    assert DecayKind.of(jnp.zeros((1, 2, 3, 4))) is DecayKind.DATA
    assert DecayKind("data") is DecayKind.DATA


@pytest.mark.parametrize("ids", [jnp.zeros((1, 5), jnp.int32), jnp.zeros((1, 6), jnp.float32)])
def test_bad_segment_ids_raise_clear_errors(ids):
    q = jnp.zeros((1, 6, 2, 4))
    with pytest.raises(ValueError, match=r"segment_ids must be None or an integer array \[b, t\]"):
        linear_attention(q, q, q, segment_ids=ids, impl="xla")
