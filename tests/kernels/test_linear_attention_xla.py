"""`xla` (chunked) linear attention against the token-by-token `reference`, through the public entry
point, all under jax.jit: values and gradients (q, k, v, log_decay, initial_state; cotangents on o
and the final state) for every decay kind, adversarial decays, segment resets, bf16, and clear
errors for bad shapes.

Legend: b batch, t sequence, h heads, k key dim, v value dim. Shapes are tiny (CPU CI)."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas import linear_attention

B, T, H, DK, DV = 2, 37, 2, 8, 6  # T = 37 is not a multiple of the chunk
CHUNK = 32  # data kind: 2 chunks of 5 binary merge levels (the second chunk padded)
RESET_LOG_DECAY = -60.0  # a decay of exp(-60): wipes the state (an extreme value)
FP32_TOL = 2e-5  # max |xla - reference| / max(1, max |reference|), values and gradients
BF16_OUT_TOL = 1.6e-2  # bf16 output rounding (2^-8 relative) plus bf16 input differences
BF16_GRAD_TOL = 3e-2


def _log_decay(seed, kind, regime, shape=(B, T, H, DK)):
    """None | [h] | [b, t, h, k] log decays. regime: random (moderate), strong (~-20 per step),
    weak (~0 per step), mixed (each token strong or weak at random, within one chunk), or
    reset-<base kind> (weak decays of the base kind broadcast to [b, t, h, k], with
    RESET_LOG_DECAY at a few positions: an extreme data-dependent decay). Inputs come from numpy
    (the threefry PRNG is slow to compile on CPU). Segment resets proper (segment_ids) are tested
    in test_kernels_segments."""
    if regime.startswith("reset-"):
        base = _log_decay(seed, regime[len("reset-"):], "weak", shape)
        if base is None:
            base = jnp.zeros(shape, jnp.float32)
        base = jnp.broadcast_to(base[None, None, :, None] if base.ndim == 1 else base, shape)
        starts = np.zeros(shape[:2], bool)
        starts[0, [5, 25]] = starts[1, [17, 18]] = True
        return jnp.where(jnp.asarray(starts)[:, :, None, None], RESET_LOG_DECAY, base)
    if kind == "none":
        return None
    rng = np.random.default_rng(seed)
    shape = (shape[2],) if kind == "head" else shape
    u = rng.uniform(size=shape).astype(np.float32)
    if regime == "random":
        out = -np.logaddexp(0.0, 1.0 - 4.0 * u)  # log_sigmoid(4u - 1)
    elif regime == "strong":
        out = -20.0 + u
    elif regime == "weak":
        out = -1e-3 * u
    else:
        out = np.where(rng.uniform(size=shape) < 0.3, -20.0 + u, -1e-3 * u)
    return jnp.asarray(out, jnp.float32)


def _inputs(seed, t=T, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, t, H, DK))
    k = rng.standard_normal((B, t, H, DK)) / np.sqrt(DK)
    v = rng.standard_normal((B, t, H, DV))
    s0 = rng.standard_normal((B, H, DK, DV))
    return (*(jnp.asarray(x, dtype) for x in (q, k, v)), jnp.asarray(s0, jnp.float32))


@partial(jax.jit, static_argnames=("impl", "chunk_size"))
def _values_and_grads(q, k, v, log_decay, s0, cot, *, impl, chunk_size):
    """(o, final_state) and the vjp of a random cotangent w.r.t. (q, k, v, log_decay, s0)."""

    def f(q, k, v, log_decay, s0):
        return linear_attention(
            q, k, v, log_decay=log_decay, initial_state=s0, return_final_state=True,
            impl=impl, chunk_size=chunk_size,
        )

    out, vjp = jax.vjp(f, q, k, v, log_decay, s0)
    return out, vjp(cot)


def _cotangent(seed, q, v):
    rng = np.random.default_rng(1000 + seed)
    b, t, h, dk = q.shape
    return (
        jnp.asarray(rng.standard_normal((b, t, h, v.shape[-1])), q.dtype),
        jnp.asarray(rng.standard_normal((b, h, dk, v.shape[-1])), jnp.float32),
    )


def _rel_err(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    assert np.all(np.isfinite(x)), "non-finite values"
    return float(np.max(np.abs(x - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def _compare(got, want, tol, what):
    names = ("o", "final_state", "dq", "dk", "dv", "dlog_decay", "dinitial_state")
    flat_got, flat_want = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(flat_got) == len(flat_want)
    errs = {n: _rel_err(g, w) for n, g, w in zip(names, flat_got, flat_want)}
    bad = {n: e for n, e in errs.items() if e > tol}
    assert not bad, f"{what}: errors above {tol}: {bad} (all: {errs})"
    return errs


def _check(seed, kind, regime, *, with_state=True, t=T, chunk_size=CHUNK):
    q, k, v, s0 = _inputs(seed, t)
    ld = _log_decay(seed + 7, kind, regime, (B, t, H, DK))
    s0 = s0 if with_state else None
    cot = _cotangent(seed, q, v)
    want = _values_and_grads(q, k, v, ld, s0, cot, impl="reference", chunk_size=CHUNK)
    got = _values_and_grads(q, k, v, ld, s0, cot, impl="xla", chunk_size=chunk_size)
    grads = [x for x in jax.tree.leaves(got[1])]
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads), "non-finite gradient"
    return _compare((got[0], [g for g in got[1] if g is not None]),
                    (want[0], [g for g in want[1] if g is not None]), FP32_TOL, f"{kind}/{regime}")


CASES = [("none", "random")] + [
    (kind, regime) for kind in ("head", "data") for regime in ("random", "strong", "weak")
] + [("data", "mixed"), ("data", "reset-none"), ("data", "reset-head"), ("data", "reset-data")]


@pytest.mark.parametrize("kind,regime", CASES)
def test_xla_matches_reference_fp32(kind, regime):
    _check(0, kind, regime, with_state=True)


@pytest.mark.parametrize("kind", ["none", "head", "data"])
def test_xla_without_initial_state_default_chunk(kind, xla_chunk_sizes):
    """chunk_size=None (the CPU default at k = 8 is a chunk of 16): t = 100 is six full chunks and
    a padded one; values and gradients match the reference, and the xla form ran with chunk 16."""
    _check(1, kind, "random", with_state=False, t=100, chunk_size=None)
    assert xla_chunk_sizes and set(xla_chunk_sizes) == {16}, xla_chunk_sizes


@pytest.mark.parametrize("chunk_size", [5, 12, 27])
def test_xla_chunk_sizes(chunk_size):
    # data kind: odd chunk lengths are single per-pair leaves (8 chunks of 5, 2 of 27); 12 = 3 · 4
    # gives 3-token per-pair leaves merged over 2 binary levels
    _check(2, "data", "mixed", chunk_size=chunk_size)


def test_extreme_decays_give_finite_gradients():
    """Decay exactly 0 (log decay -inf) and RESET_LOG_DECAY mixed with ~0: finite and correct."""
    q, k, v, s0 = _inputs(8)
    ld = _log_decay(9, "data", "weak")
    ld = ld.at[:, 3].set(-jnp.inf).at[:, 20].set(RESET_LOG_DECAY)
    cot = _cotangent(8, q, v)
    want = _values_and_grads(q, k, v, ld, s0, cot, impl="reference", chunk_size=CHUNK)
    got = _values_and_grads(q, k, v, ld, s0, cot, impl="xla", chunk_size=CHUNK)
    _compare(got, want, FP32_TOL, "extreme")
    head = jnp.array([-jnp.inf, -60.0])
    want = _values_and_grads(q, k, v, head, s0, cot, impl="reference", chunk_size=CHUNK)
    got = _values_and_grads(q, k, v, head, s0, cot, impl="xla", chunk_size=CHUNK)
    _compare(got, want, FP32_TOL, "extreme-head")


@pytest.mark.parametrize("kind", ["none", "head", "data"])
def test_xla_bf16_inputs(kind):
    """bf16 q, k, v: output in bf16 within BF16_OUT_TOL of the fp32 reference on the same (rounded)
    inputs; final state fp32 and tight (fp32 math); gradients within BF16_GRAD_TOL."""
    q, k, v, s0 = _inputs(10, dtype=jnp.bfloat16)
    ld = _log_decay(11, kind, "random")
    cot = _cotangent(10, q, v)
    got = _values_and_grads(q, k, v, ld, s0, cot, impl="xla", chunk_size=CHUNK)
    assert got[0][0].dtype == jnp.bfloat16 and got[0][1].dtype == jnp.float32
    f32 = lambda x: x.astype(jnp.float32)  # noqa: E731
    want = _values_and_grads(
        f32(q), f32(k), f32(v), ld, s0, jax.tree.map(f32, cot), impl="reference", chunk_size=CHUNK
    )
    assert _rel_err(got[0][0], want[0][0]) < BF16_OUT_TOL
    assert _rel_err(got[0][1], want[0][1]) < FP32_TOL
    for g, w in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1])):
        assert _rel_err(g, w) < BF16_GRAD_TOL


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda a: {**a, "q": a["q"][0]}, r"q must be a 4-d array"),
        (lambda a: {**a, "k": a["k"][:, :, :1]}, r"k must have the shape of q"),
        (lambda a: {**a, "v": a["v"][:, :5]}, r"v must be \[b, t, h, v\]"),
        (lambda a: {**a, "log_decay": jnp.zeros((B, T, H))}, r"log_decay must be None, \[h\]"),
        (lambda a: {**a, "log_decay": jnp.zeros((H + 1,))}, r"log_decay must be None, \[h\]"),
        (lambda a: {**a, "initial_state": jnp.zeros((B, H, DV, DK))}, r"initial_state must be"),
        (lambda a: {**a, "q": a["q"].astype(jnp.int32)}, r"q must be float32, bfloat16"),
        (lambda a: {**a, "q": a["q"][:, :0], "k": a["k"][:, :0], "v": a["v"][:, :0]}, r"t >= 1"),
    ],
)
def test_bad_inputs_raise_clear_errors(change, match):
    q, k, v, s0 = _inputs(14)
    args = change({"q": q, "k": k, "v": v, "log_decay": None, "initial_state": s0})
    with pytest.raises(ValueError, match=match):
        linear_attention(args.pop("q"), args.pop("k"), args.pop("v"), impl="xla", **args)


def test_bad_chunk_size_raises():
    q, k, v, _ = _inputs(15)
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        linear_attention(q, k, v, impl="xla", chunk_size=0)


@pytest.mark.parametrize("kind", ["none", "head", "data"])
def test_xla_blocked_sweep_with_segments(kind):
    """The outer sweep over blocks (block_len 16 = 2 chunks of 8; t = 37: 2 blocks + a 5-token
    tail) with packed documents (starts inside a block, on a block edge, in the tail) equals the
    reference: values and gradients."""
    from kernels_pallas.linear_attention.api import segment_starts
    from kernels_pallas.linear_attention.xla import linear_attention_xla

    q, k, v, s0 = _inputs(20)
    ld = _log_decay(21, kind, "random")
    ids = np.zeros((B, T), np.int32)
    ids[0, 7:] = 1
    ids[0, 16:] = 2
    ids[0, 34:] = 3
    ids[1, 32:] = 1
    starts = segment_starts(jnp.asarray(ids))
    cot = _cotangent(20, q, v)

    @partial(jax.jit, static_argnames="blocked")
    def run(q, k, v, ld, s0, blocked):
        def f(q, k, v, ld, s0):
            if blocked:
                return linear_attention_xla(q, k, v, ld, s0, starts, chunk_size=8, block_len=16)
            return linear_attention(q, k, v, log_decay=ld, segment_ids=jnp.asarray(ids),
                                    initial_state=s0, return_final_state=True, impl="reference")
        out, vjp = jax.vjp(f, q, k, v, ld, s0)
        return out, vjp(cot)

    got = run(q, k, v, ld, s0, blocked=True)
    want = run(q, k, v, ld, s0, blocked=False)
    _compare((got[0], [g for g in got[1] if g is not None]),
             (want[0], [g for g in want[1] if g is not None]), FP32_TOL, f"blocked {kind}")


@pytest.mark.parametrize("remat", [True, False])
def test_xla_data_decay_with_and_without_remat(monkeypatch, remat):
    """The data-decay block terms, recomputed in the backward (config.XLA_REMAT_DATA_DECAY: TPU,
    GPU) or stored (CPU): both match the reference recurrence, values and gradients; the choice
    is read at trace time, so each setting gets its own trace here."""
    from kernels_pallas.linear_attention import config

    monkeypatch.setitem(config.XLA_REMAT_DATA_DECAY, jax.default_backend(), remat)
    assert config.xla_remat_data_decay() is remat
    q, k, v, s0 = _inputs(3)
    ld = _log_decay(10, "data", "random")
    cot = _cotangent(3, q, v)
    want = _values_and_grads(q, k, v, ld, s0, cot, impl="reference", chunk_size=CHUNK)
    fresh = jax.jit(_values_and_grads.__wrapped__, static_argnames=("impl", "chunk_size"))
    got = fresh(q, k, v, ld, s0, cot, impl="xla", chunk_size=CHUNK)
    _compare(got, want, FP32_TOL, f"data decay, remat={remat}")
