"""impl="pallas" delta rule against the token-by-token reference: values and gradients (q, k, v,
beta, log_decay, initial_state; cotangents on o and the final state), gated with packed documents
and an initial state, ungated without, t not a multiple of the chunk; bf16 inputs on bf16 MXU
operands within flash-linear-attention's bounds for its Gated DeltaNet chunk kernel.

The kernels run in Pallas TPU interpret mode on CPU (out-of-bounds reads raise, scratch starts as
NaN), so these tests execute the real kernel code. Shapes are tiny: interpret mode is slow.
Legend: b batch, t sequence, h heads, k key dim, v value dim."""

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from helpers.delta_rule_cases import NAMES, compare, inputs, values_and_grads
from kernels_pallas import delta_rule
from kernels_pallas.delta_rule.config import DeltaRuleBlocks
from kernels_pallas.delta_rule.pallas import delta_rule_pallas
from kernels_pallas.linear_attention.api import segment_starts

IDS = np.array([[0] * 5 + [1] * 11 + [2] * 1 + [3] * 20,  # starts at 5, 16 (a chunk edge), 17
                [4] * 8 + [5] * 24 + [4] * 5])  # starts at 8, 32 (a chunk edge)
FP32_TOL = 1e-5  # max |pallas - reference| / max(1, max |reference|) (measured <= 4e-7)
# fla's bounds for its fp16 Gated DeltaNet chunk kernel against its reference (RMS(x - ref) /
# RMS(ref), tests/ops/test_gated_delta.py::test_chunk, fla-org/flash-linear-attention @ 0a8cd55)
FLA = {"o": 0.005, "final_state": 0.005, "dq": 0.008, "dk": 0.008, "dv": 0.008, "dbeta": 0.02,
       "dlog_decay": 0.02, "dinitial_state": 0.008}


def run(impl, segments, q, k, v, beta, g, s0, **kw):
    return delta_rule(q, k, v, beta, log_decay=g, initial_state=s0, return_final_state=True,
                      segment_ids=jnp.asarray(IDS) if segments else None, impl=impl, **kw)


@pytest.mark.parametrize("gated,segments", [(True, True), (False, False)])
def test_pallas_matches_reference_fp32(gated, segments):
    """b=2, h=2, t=37 in chunks of 16 (the last one padded); gated: adversarial decays (-20 steps
    next to ~0 ones) with packed documents and an initial state; ungated: neither, and the
    heads-first grid (megacore order)."""
    args, cot = inputs(0, (2, 37, 2, 8, 6), "strong" if gated else "beta2", gated)
    kw = dict(chunk_size=16)
    if not gated:
        args = args[:5] + (None,)
    want = values_and_grads(partial(run, "reference", segments), args, cot)
    got = values_and_grads(partial(run, "pallas", segments, **kw), args, cot)
    compare(got, want, FP32_TOL, f"gated={gated}")
    if not gated:
        def hbn(q, k, v, beta, g, s0):
            return delta_rule_pallas(q, k, v, beta, g, s0, blocks=DeltaRuleBlocks(16, "hbn"))
        other = values_and_grads(hbn, args, cot)
        for x, y in zip(other[0] + other[1], got[0] + got[1]):
            assert (x is None) == (y is None)
            if x is not None:
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def err_ratio(x, ref) -> float:
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    assert np.all(np.isfinite(x))
    return float(np.sqrt(np.mean((x - ref) ** 2)) / (np.sqrt(np.mean(ref ** 2)) + 1e-8))


def test_bf16_within_fla_bounds():
    """bf16 q, k, v, cotangent rounded once; the reference runs on those values in float32. bf16
    MXU operands (the recurrence's float32 products as hi + lo pairs): every output within fla's
    bounds (measured at t=64, k=v=32, chunk 32, ~3 documents a row: o 2.8e-3, final state 5e-6,
    dq/dk/dv 2.1e-3, dbeta 1.4e-3, dlog_decay 1.0e-3, dinitial_state 1e-4 to 5e-4). With
    matmul_dtype=float32 on the same inputs only the bf16 outputs (o, dq, dk, dv) are rounded:
    the rest within 1e-5."""
    t = 48
    args, cot = inputs(5, (1, t, 2, 16, 16), "random", True, dtype=jnp.bfloat16)
    ids = np.cumsum(np.random.default_rng(5).random((1, t)) < 3.0 / t, axis=1)
    starts = segment_starts(jnp.asarray(ids))
    f32 = lambda x: None if x is None else x.astype(jnp.float32)  # noqa: E731

    def ref(q, k, v, beta, g, s0):
        return delta_rule(q, k, v, beta, log_decay=g, initial_state=s0, return_final_state=True,
                          segment_ids=jnp.asarray(ids), impl="reference")

    want = values_and_grads(ref, tuple(f32(x) for x in args), (f32(cot[0]), cot[1]))
    flat_want = list(want[0]) + list(want[1])
    for mdt in (None, jnp.float32):
        def kern(q, k, v, beta, g, s0, mdt=mdt):
            return delta_rule_pallas(q, k, v, beta, g, s0, starts, chunk_size=16,
                                     matmul_dtype=mdt)
        got = values_and_grads(kern, args, cot)
        assert got[0][0].dtype == jnp.bfloat16 and got[0][1].dtype == jnp.float32
        errs = {n: err_ratio(x, w) for n, x, w in zip(NAMES, list(got[0]) + list(got[1]),
                                                      flat_want)}
        if mdt is None:
            bad = {n: e for n, e in errs.items() if not e < FLA[n]}
        else:
            bad = {n: e for n, e in errs.items() if n not in ("o", "dq", "dk", "dv") and e > 1e-5}
        assert not bad, (mdt, bad, errs)


def test_pallas_inside_shard_map_8_devices(tmp_path):
    """Batch x head sharded shard_map over 8 simulated CPU devices (the mixers' layout) equals the
    unsharded kernel: outputs, final state and every gradient (helpers.pallas_shard_map_check)."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "errors.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(root), str(root / "tests")]),
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8")
    res = subprocess.run([sys.executable, "-m", "helpers.pallas_shard_map_check", str(out),
                          "delta_rule"], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    errors = json.loads(out.read_text())
    assert sorted(errors) == sorted(("o", "state", "dq", "dk", "dv", "dbeta", "dlog_decay", "ds0"))
    assert all(e < 1e-5 for e in errors.values()), errors
