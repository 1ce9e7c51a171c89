"""Packed documents == separate documents, for every decay kind and implementation.

A row of segment_ids packs several documents; `linear_attention(..., segment_ids=...)` must give,
for each document, exactly what running that document alone gives (the first document continues
from the initial state, later ones start from zero), and the final state of the last document.
Checked for values and gradients (q, k, v, log_decay, initial_state; cotangents on o and the final
state) against separate token-by-token reference runs, for impl = reference, xla and pallas
(interpret mode on CPU). Boundaries fall inside chunks, on chunk boundaries, a one-token document
and a repeated id (A, B, A: three documents). The none and head kinds must not build a
[b, t, h, k] array (checked on the jaxpr).

Legend: b batch, t sequence, h heads, k key dim, v value dim."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas import linear_attention

B, T, H, DK, DV = 2, 37, 2, 8, 16
CHUNK = {"reference": 1, "xla": 16, "pallas": 32}  # pallas 32: two sub-chunks of 16
SEGMENTS = np.array([[0] * 5 + [1] * 11 + [0] * 1 + [2] * 20,  # starts at 5, 16 (chunk edge), 17
                     [3] * 8 + [4] * 24 + [5] * 5])  # starts at 8, 32 (chunk edge)
TOL = 5e-5  # max |packed - separate| / max(1, max |separate|)


def _inputs(kind, seed=0):
    rng = np.random.default_rng(seed)
    f = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    q, k, v = f(B, T, H, DK), f(B, T, H, DK) / np.sqrt(DK), f(B, T, H, DV)
    s0 = f(B, H, DK, DV)
    if kind == "none":
        ld = None
    elif kind == "head":
        ld = jnp.array([-0.05, -2.0], jnp.float32)
    else:
        ld = jnp.asarray(-np.logaddexp(0.0, 1.0 - 4.0 * rng.uniform(size=(B, T, H, DK))),
                         jnp.float32)
    cot = (f(B, T, H, DV), f(B, H, DK, DV))
    return (q, k, v, ld, s0), cot


def _documents(row):
    ids = SEGMENTS[row]
    cuts = [0] + [i for i in range(1, T) if ids[i] != ids[i - 1]] + [T]
    return list(zip(cuts[:-1], cuts[1:]))


def packed(impl, q, k, v, ld, s0):
    return linear_attention(q, k, v, log_decay=ld, segment_ids=jnp.asarray(SEGMENTS),
                            initial_state=s0, return_final_state=True, impl=impl,
                            chunk_size=CHUNK[impl])


def separate(q, k, v, ld, s0):
    """Every document of every row run alone with the reference; outputs re-assembled."""
    rows, finals = [], []
    for r in range(B):
        outs, state = [], None
        for i, (a, e) in enumerate(_documents(r)):
            d = None if ld is None else (ld if ld.ndim == 1 else ld[r:r + 1, a:e])
            o, state = linear_attention(q[r:r + 1, a:e], k[r:r + 1, a:e], v[r:r + 1, a:e],
                                        log_decay=d, initial_state=s0[r:r + 1] if i == 0 else None,
                                        return_final_state=True, impl="reference")
            outs.append(o)
        rows.append(jnp.concatenate(outs, axis=1))
        finals.append(state)
    return jnp.concatenate(rows, axis=0), jnp.concatenate(finals, axis=0)


@partial(jax.jit, static_argnums=0)
def _values_and_grads(fn, args, cot):
    out, vjp = jax.vjp(fn, *args)
    return out, vjp(cot)


def _rel_err(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    assert np.all(np.isfinite(x)), "non-finite values"
    return float(np.max(np.abs(x - ref)) / max(1.0, float(np.max(np.abs(ref)))))


@pytest.mark.parametrize("impl", ["reference", "xla", "pallas"])
@pytest.mark.parametrize("kind", ["none", "head", "data"])
def test_packed_equals_separate_documents(kind, impl):
    args, cot = _inputs(kind)
    got = _values_and_grads(partial(packed, impl), args, cot)
    want = _values_and_grads(separate, args, cot)
    names = ("o", "final_state", "dq", "dk", "dv", "dlog_decay", "dinitial_state")
    g, w = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(g) == len(w)
    names = [n for n in names if not (kind == "none" and n == "dlog_decay")]
    errs = {n: _rel_err(x, y) for n, x, y in zip(names, g, w)}
    bad = {n: e for n, e in errs.items() if e > TOL}
    assert not bad, f"{kind}/{impl}: errors above {TOL}: {bad} (all {errs})"


@pytest.mark.parametrize("impl", ["reference", "xla", "pallas"])
@pytest.mark.parametrize("kind", ["none", "head"])
def test_no_token_by_key_tensor_for_none_and_head(kind, impl):
    """With segment_ids, the none / head kinds keep their own path: no intermediate of the
    [b, t, h, k] (or chunked [b, h, n, c, k]) decay shape is ever float-filled from the decay."""
    (q, k, v, ld, s0), _ = _inputs(kind)
    jaxpr = jax.make_jaxpr(lambda q, k, v, ld: packed(impl, q, k, v, ld, s0))(q, k, v, ld)
    eqns = [e for e in jaxpr.jaxpr.eqns]

    def walk(eqns):
        for e in eqns:
            yield e
            for sub in jax.core.jaxprs_in_params(e.params):
                yield from walk(sub.eqns)

    for e in walk(eqns):
        if e.primitive.name in ("broadcast_in_dim", "select_n", "exp"):
            for out in e.outvars:
                shape = tuple(getattr(out.aval, "shape", ()))
                assert shape != (B, T, H, DK), f"{impl}/{kind}: {e.primitive} builds {shape}"
