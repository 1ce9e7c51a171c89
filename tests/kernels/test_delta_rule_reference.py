"""The delta rule's `reference` (token scan) and decode step, against an independent float64 numpy
loop of the textbook matrix form S_t = exp(g_t) (I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t,
o_t = q_t S_t, with packed documents and an initial state; the decode step token by token and a
prefix continued from its final state equal the whole scan; bad inputs get one clear error.

Legend: b batch, t sequence, h heads, k key dim, v value dim."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas import delta_rule, delta_rule_step

B, T, H, DK, DV = 2, 13, 2, 4, 3
IDS = np.array([[0] * 4 + [1] * 1 + [2] * 8,  # starts at 4 and 5 (a one-token document)
                [7] * 9 + [3] * 4])
TOL = 1e-5  # float32 scan against float64, relative to max(1, max |ref|)


def inputs(seed=0, gated=True):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, DK))
    k = rng.standard_normal((B, T, H, DK))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # the mixer's L2-normalised keys
    v = rng.standard_normal((B, T, H, DV))
    beta = rng.uniform(0.05, 1.0, (B, T, H))
    g = np.log(rng.uniform(0.5, 1.0, (B, T, H))) if gated else None
    s0 = rng.standard_normal((B, H, DK, DV))
    return q, k, v, beta, g, s0


def numpy_delta_rule(q, k, v, beta, g, s0, ids):
    """float64: S_t = a_t (I - β_t k_tᵀ k_t) S_{t-1} + β_t k_tᵀ v_t per row and head."""
    o = np.zeros(v.shape)
    final = np.zeros(s0.shape)
    for b in range(B):
        for h in range(H):
            s = s0[b, h].copy()
            for t in range(T):
                if t and ids[b, t] != ids[b, t - 1]:
                    s = np.zeros_like(s)
                kt = k[b, t, h][:, None]  # column [k, 1]
                a = 1.0 if g is None else np.exp(g[b, t, h])
                s = a * (np.eye(DK) - beta[b, t, h] * kt @ kt.T) @ s + beta[b, t, h] * kt @ v[b, t, h][None]
                o[b, t, h] = q[b, t, h] @ s
            final[b, h] = s
    return o, final


def rel_err(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    assert np.all(np.isfinite(x))
    return float(np.max(np.abs(x - ref)) / max(1.0, float(np.max(np.abs(ref)))))


@pytest.mark.parametrize("gated", [True, False])
def test_reference_matches_the_matrix_form(gated):
    q, k, v, beta, g, s0 = inputs(gated=gated)
    f32 = lambda x: None if x is None else jnp.asarray(x, jnp.float32)  # noqa: E731
    o, s = delta_rule(f32(q), f32(k), f32(v), f32(beta), log_decay=f32(g),
                      segment_ids=jnp.asarray(IDS), initial_state=f32(s0),
                      return_final_state=True, impl="reference")
    o_np, s_np = numpy_delta_rule(q, k, v, beta, g, s0, IDS)
    assert o.dtype == jnp.float32 and s.dtype == jnp.float32
    assert rel_err(o, o_np) < TOL and rel_err(s, s_np) < TOL
    # without segments and initial state: the plain recurrence from zero
    o, s = delta_rule(f32(q), f32(k), f32(v), f32(beta), log_decay=f32(g), impl="reference",
                      return_final_state=True)
    o_np, s_np = numpy_delta_rule(q, k, v, beta, g, 0 * s0, np.zeros_like(IDS))
    assert rel_err(o, o_np) < TOL and rel_err(s, s_np) < TOL


def test_decode_steps_equal_the_scan():
    """delta_rule_step token by token from s0, and a prefix of 6 tokens continued by delta_rule
    from its final state, give the scan's outputs and final state (float32: equal to 1e-6)."""
    q, k, v, beta, g, s0 = (jnp.asarray(x, jnp.float32) for x in inputs(1))
    o, final = delta_rule(q, k, v, beta, log_decay=g, initial_state=s0, return_final_state=True,
                          impl="reference")
    step = jax.jit(lambda q, k, v, b, s, g: delta_rule_step(q, k, v, b, s, log_decay=g))
    state, outs = s0, []
    for t in range(T):
        o_t, state = step(q[:, t], k[:, t], v[:, t], beta[:, t], state, g[:, t])
        outs.append(o_t)
    assert state.dtype == jnp.float32
    np.testing.assert_allclose(np.stack(outs, axis=1), o, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(state, final, rtol=1e-6, atol=1e-6)
    cut = 6
    o1, s1 = delta_rule(q[:, :cut], k[:, :cut], v[:, :cut], beta[:, :cut], log_decay=g[:, :cut],
                        initial_state=s0, return_final_state=True, impl="reference")
    o2, s2 = delta_rule(q[:, cut:], k[:, cut:], v[:, cut:], beta[:, cut:], log_decay=g[:, cut:],
                        initial_state=s1, return_final_state=True, impl="reference")
    np.testing.assert_allclose(jnp.concatenate([o1, o2], axis=1), o, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s2, final, rtol=1e-6, atol=1e-6)
    o_bf, s_bf = delta_rule_step(q[:, 0].astype(jnp.bfloat16), k[:, 0], v[:, 0], beta[:, 0], s0)
    assert o_bf.dtype == jnp.bfloat16 and s_bf.dtype == jnp.float32


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda a: {**a, "beta": a["beta"][..., None]}, r"beta must be a float array \[b, t, h\]"),
        (lambda a: {**a, "log_decay": a["beta"][:, :3]}, r"log_decay must be None or a float"),
        (lambda a: {**a, "v": a["v"][:, :5]}, r"v must be \[b, t, h, v\]"),
        (lambda a: {**a, "initial_state": jnp.zeros((B, H, DV, DK))}, r"initial_state must be"),
        (lambda a: {**a, "segment_ids": jnp.zeros((B, T))}, r"segment_ids must be None or an int"),
    ],
)
def test_bad_inputs_raise_clear_errors(change, match):
    q, k, v, beta, g, s0 = (jnp.asarray(x, jnp.float32) for x in inputs(2))
    args = change({"q": q, "k": k, "v": v, "beta": beta, "log_decay": g, "initial_state": s0,
                   "segment_ids": None})
    pos = [args.pop(n) for n in ("q", "k", "v", "beta")]
    with pytest.raises(ValueError, match="^delta_rule: " + match):
        delta_rule(*pos, impl="reference", **args)
    with pytest.raises(ValueError, match=r"step: state must be \[b, h, k, v\]"):
        delta_rule_step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0], s0[..., :1])
