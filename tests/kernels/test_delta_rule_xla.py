"""`xla` (chunked WY form) delta rule against the token-by-token `reference`, through the public
entry point, under jax.jit: values and gradients (q, k, v, beta, log_decay, initial_state;
cotangents on o and the final state) with and without the gate, with packed documents, odd
lengths (t not a multiple of the chunk), chunks that are not powers of two or longer than t,
adversarial decays, beta up to 2, and bf16 inputs.

Legend: b batch, t sequence, h heads, k key dim, v value dim. Shapes are tiny (CPU CI)."""

from functools import partial

import jax.numpy as jnp
import numpy as np
import pytest

from helpers.delta_rule_cases import compare, inputs, rel_err, values_and_grads
from kernels_pallas import delta_rule

B, T = 2, 37  # T = 37: chunks of 16 leave a partial third chunk
IDS = np.array([[0] * 5 + [1] * 11 + [2] * 1 + [3] * 20,  # starts at 5, 16 (a chunk edge), 17
                [4] * 8 + [5] * 24 + [4] * 5])  # starts at 8, 32 (a chunk edge)
FP32_TOL = 5e-6  # max |xla - reference| / max(1, max |reference|), values and gradients (measured <= 4e-7)
BF16_OUT_TOL = 1.6e-2  # bf16 output rounding (2^-8 relative) on bf16 inputs
BF16_GRAD_TOL = 3e-2


def run(impl, chunk_size, segments, q, k, v, beta, g, s0):
    return delta_rule(q, k, v, beta, log_decay=g, initial_state=s0, return_final_state=True,
                      segment_ids=jnp.asarray(IDS) if segments else None, impl=impl,
                      chunk_size=chunk_size)


def check(args, cot, chunk_size, segments, what, tol=FP32_TOL):
    want = values_and_grads(partial(run, "reference", None, segments), args, cot)
    got = values_and_grads(partial(run, "xla", chunk_size, segments), args, cot)
    return compare(got, want, tol, what)


@pytest.mark.parametrize("regime,gated", [("random", True), ("strong", True), ("reset", True),
                                          ("beta2", True), ("random", False)])
def test_xla_matches_reference_with_segments(regime, gated):
    args, cot = inputs(0, (B, T, 2, 8, 6), regime, gated)
    check(args, cot, 16, True, f"{regime} gated={gated}")


@pytest.mark.parametrize("chunk_size", [5, 12, 64])
def test_xla_chunk_sizes(chunk_size):
    """Chunks that are not powers of two (the inverse pads them) or longer than t (one chunk)."""
    args, cot = inputs(1, (B, T, 2, 8, 6), "random")
    check(args, cot, chunk_size, False, f"chunk {chunk_size}")


def test_xla_default_chunk_without_initial_state():
    """chunk_size=None (the backend default) over t = 100 (several chunks and a padded one), no
    initial state (its gradient is None) and no segments."""
    args, cot = inputs(2, (1, 100, 2, 16, 8), "random")
    args = args[:5] + (None,)
    want = values_and_grads(partial(run, "reference", None, False), args, cot)
    got = values_and_grads(partial(run, "xla", None, False), args, cot)
    compare(got, want, FP32_TOL, "default chunk")


def test_xla_bf16_inputs():
    """bf16 q, k, v: o in bf16 within BF16_OUT_TOL of the float32 reference on the same rounded
    inputs; the final state float32 and tight (float32 math); gradients within BF16_GRAD_TOL."""
    args, cot = inputs(3, (B, T, 2, 8, 6), "random", dtype=jnp.bfloat16)
    got = values_and_grads(partial(run, "xla", 16, True), args, cot)
    assert got[0][0].dtype == jnp.bfloat16 and got[0][1].dtype == jnp.float32
    f32 = lambda x: None if x is None else x.astype(jnp.float32)  # noqa: E731
    args32 = tuple(f32(x) for x in args)
    want = values_and_grads(partial(run, "reference", None, True), args32,
                            (f32(cot[0]), cot[1]))
    assert rel_err(got[0][0], want[0][0]) < BF16_OUT_TOL
    assert rel_err(got[0][1], want[0][1]) < FP32_TOL
    for g, w in zip(got[1], want[1]):
        assert rel_err(g, w) < BF16_GRAD_TOL


def test_bad_chunk_size_raises():
    args, _ = inputs(4, (1, 8, 1, 4, 4))
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        delta_rule(*args[:4], impl="xla", chunk_size=0)


def test_xla_blocked_sweep_with_segments():
    """The outer sweep over blocks (block_len 16 = 2 chunks of 8; t = 37: 2 blocks and a 5-token
    tail) with packed documents (starts inside a block, on a block edge (16, 32), in the tail)
    equals the reference: values and gradients."""
    from kernels_pallas.delta_rule.xla import delta_rule_xla
    from kernels_pallas.linear_attention.api import segment_starts

    ids = IDS.copy()
    ids[0, 34:] = 9
    starts = segment_starts(jnp.asarray(ids))

    def blocked(q, k, v, beta, g, s0):
        return delta_rule_xla(q, k, v, beta, g, s0, starts, chunk_size=8, block_len=16)

    def reference(q, k, v, beta, g, s0):
        return delta_rule(q, k, v, beta, log_decay=g, initial_state=s0, return_final_state=True,
                          segment_ids=jnp.asarray(ids), impl="reference")

    args, cot = inputs(6, (B, T, 2, 8, 6), "random")
    compare(values_and_grads(blocked, args, cot), values_and_grads(reference, args, cot),
            FP32_TOL, "blocked")


@pytest.mark.parametrize("c", [1, 5, 16])
def test_unit_lower_inverse_and_its_vjp(c):
    """wy.unit_lower_inverse (block doubling; c = 5 padded to 8) equals numpy's inverse of I + L,
    and its custom VJP equals autodiff of jnp.linalg.inv restricted to L's strictly lower part."""
    import jax

    from kernels_pallas.delta_rule.wy import unit_lower_inverse

    rng = np.random.default_rng(c)
    low = np.tril(0.4 * rng.standard_normal((3, c, c)), -1).astype(np.float32)
    dx = rng.standard_normal((3, c, c)).astype(np.float32)
    x = np.asarray(unit_lower_inverse(jnp.asarray(low)), np.float64)
    np.testing.assert_allclose(x, np.linalg.inv(np.eye(c) + low.astype(np.float64)), atol=1e-5)
    got = jax.grad(lambda m: jnp.sum(unit_lower_inverse(m) * dx))(jnp.asarray(low))
    want = jax.grad(lambda m: jnp.sum(jnp.linalg.inv(jnp.eye(c) + m) * dx))(jnp.asarray(low))
    np.testing.assert_allclose(got, np.tril(np.asarray(want), -1), rtol=1e-4, atol=1e-5)
