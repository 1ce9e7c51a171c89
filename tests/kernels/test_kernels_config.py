"""The per-backend defaults live in one place (kernels_pallas.linear_attention.config) and are what
`linear_attention(..., chunk_size=None)` uses; the decay kind is resolved by name; bad segment ids
get a clear error. Legend: b batch, t sequence, h heads, k key dim, v value dim."""

import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas import DecayKind, default_chunk_size, linear_attention
from kernels_pallas.linear_attention import config


def test_default_chunk_size_per_backend():
    assert default_chunk_size("pallas", "tpu") == config.DEFAULTS["tpu"].chunk_size == 128
    assert default_chunk_size("xla", "cpu") == config.XLA_CHUNK["cpu"]
    assert default_chunk_size("xla", "tpu") == config.XLA_CHUNK["tpu"]
    assert config.xla_block_len(64, "cpu") % 64 == 0
    assert config.xla_block_len(64, "tpu") is None


def test_chunk_size_none_is_the_backend_default():
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 150, 2, 4)), jnp.float32) for _ in range(3))
    ld = jnp.array([-0.1, -1.0])
    got = linear_attention(q, k, v, log_decay=ld, impl="xla")
    want = linear_attention(q, k, v, log_decay=ld, impl="xla",
                            chunk_size=default_chunk_size("xla"))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


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
