"""Inputs and comparisons shared by the delta-rule kernel tests (tests/kernels/test_delta_rule_*).

    args, cot = inputs(seed, shape=(b, t, h, k, v), regime=..., gated=True, dtype=jnp.float32)
    got = values_and_grads(fn, args, cot)    # ((o, final_state), (dq, dk, dv, dbeta, dlog_decay, ds0))
    errs = compare(got, want, tol, what)     # max |x - ref| / max(1, max |ref|) per output

args = (q, k, v, beta, log_decay, s0): q ~ N(0, 1/k), k L2-normalised rows (the mixer's keys), v ~
N(0, 1), beta in (0, 1) (regime "beta2": (0, 2), the negative-eigenvalue range), log_decay per
regime: "random" log σ(4u − 1) ~ [-1.3, -0.05]; "strong" -20 per step on a third of the tokens,
~0 elsewhere; "reset" weak decays with -60 (an extreme value that wipes the state) at a few
tokens; None when gated=False. The cotangents cover o and the final state. Inputs come from numpy
(the threefry PRNG is slow to compile on CPU). Legend: b batch, t sequence, h heads, k key dim,
v value dim.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

NAMES = ("o", "final_state", "dq", "dk", "dv", "dbeta", "dlog_decay", "dinitial_state")


def inputs(seed=0, shape=(2, 37, 2, 8, 6), regime="random", gated=True, dtype=jnp.float32):
    b, t, h, dk, dv = shape
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, t, h, dk)) / np.sqrt(dk)
    k = rng.standard_normal((b, t, h, dk))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((b, t, h, dv))
    beta = rng.uniform(0.0, 2.0 if regime == "beta2" else 1.0, (b, t, h))
    u = rng.uniform(size=(b, t, h))
    if regime == "strong":
        g = np.where(rng.uniform(size=(b, t, h)) < 0.3, -20.0 + u, -1e-3 * u)
    elif regime == "reset":
        g = -1e-2 * u
        g[0, [3, 20]] = g[-1, [17, 18]] = -60.0
    else:
        g = -np.logaddexp(0.0, 1.0 - 4.0 * u)
    s0 = rng.standard_normal((b, h, dk, dv))
    cot = (jnp.asarray(rng.standard_normal((b, t, h, dv)), dtype),
           jnp.asarray(rng.standard_normal((b, h, dk, dv)), jnp.float32))
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    args = (*(jnp.asarray(x, dtype) for x in (q, k, v)), f32(beta), f32(g) if gated else None,
            f32(s0))
    return args, cot


@partial(jax.jit, static_argnums=0)
def values_and_grads(fn, args, cot):
    """fn(q, k, v, beta, log_decay, s0) -> (o, final_state); its values and VJP on cot."""
    out, vjp = jax.vjp(fn, *args)
    return out, vjp(cot)


def rel_err(x, ref) -> float:
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    assert np.all(np.isfinite(x)), "non-finite values"
    return float(np.max(np.abs(x - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def compare(got, want, tol, what) -> dict:
    """Every output and gradient of got within tol of want (rel_err); returns the errors."""
    (o, s), grads = got
    (o_r, s_r), grads_r = want
    errs = {"o": rel_err(o, o_r), "final_state": rel_err(s, s_r)}
    for name, g, g_r in zip(NAMES[2:], grads, grads_r):
        assert (g is None) == (g_r is None), name
        if g_r is not None:
            errs[name] = rel_err(g, g_r)
    bad = {n: e for n, e in errs.items() if not e <= tol}
    assert not bad, f"{what}: errors above {tol}: {bad} (all: {errs})"
    return errs
