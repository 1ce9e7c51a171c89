"""impl="pallas" against the token-by-token reference: values and gradients, every decay kind.

The kernels run in Pallas TPU interpret mode on CPU (out-of-bounds reads raise, scratch starts as
NaN), so these tests execute the real kernel code. Shapes are tiny: interpret mode is slow.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas import linear_attention
from kernels_pallas.linear_attention.config import LinearAttentionBlocks, check_tiling
from kernels_pallas.linear_attention.pallas import default_interpret, linear_attention_pallas
from kernels_pallas.linear_attention.reference import linear_attention_reference
from kernels_pallas.linear_attention.xla import linear_attention_xla

RESET_LOG_DECAY = -60.0  # an extreme per-step decay (wipes the state)
B, T, H, K, V = 2, 40, 2, 8, 16  # T = 40: chunks of 32 leave a partial last chunk
CHUNK = 32  # two sub-chunks of 16 (the CPU default) per chunk: both intra-chunk paths run
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def adversarial_log_decay(key, shape):
    """Per-step log decays mixing ~0, moderate, -20 and RESET_LOG_DECAY (-60) values."""
    k1, k2 = jax.random.split(key)
    moderate = jax.nn.log_sigmoid(2.0 + 3.0 * jax.random.normal(k1, shape))
    pick = jax.random.randint(k2, shape, 0, 10)
    out = jnp.where(pick == 0, -20.0, moderate)
    out = jnp.where(pick == 1, -1e-4, out)
    return jnp.where(pick == 2, RESET_LOG_DECAY, out)


def make_inputs(kind, dtype=jnp.float32, t=T, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 8)
    q = jax.random.normal(ks[0], (B, t, H, K)).astype(dtype)
    k = jax.random.normal(ks[1], (B, t, H, K)).astype(dtype)
    v = jax.random.normal(ks[2], (B, t, H, V)).astype(dtype)
    s0 = jax.random.normal(ks[3], (B, H, K, V))
    if kind == "none":
        d = None
    elif kind == "head":  # one head decays by -20 per step, the other almost not at all
        d = jnp.array([-20.0, -1e-3])
    else:
        d = adversarial_log_decay(ks[4], (B, t, H, K))
    do = jax.random.normal(ks[5], (B, t, H, V)).astype(dtype)
    ds = jax.random.normal(ks[6], (B, H, K, V))
    return (q, k, v, d, s0), (do, ds)


def values_and_grads(fn, args, cts):
    """(o, final_state) and the VJP w.r.t. q, k, v, log_decay, initial_state, under jax.jit."""
    q, k, v, d, s0 = args

    @jax.jit
    def run(q, k, v, d, s0, do, ds):
        out, vjp = jax.vjp(lambda *a: fn(*a), q, k, v, d, s0)
        return out, vjp((do, ds))

    return run(q, k, v, d, s0, *cts)


def pallas_fn(q, k, v, d, s0):
    """The public entry point with impl="pallas"."""
    return linear_attention(q, k, v, log_decay=d, initial_state=s0, return_final_state=True,
                            impl="pallas", chunk_size=CHUNK)


def rel_err(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(x - ref)) / (np.max(np.abs(ref)) + 1e-30))


def check_close(got, want, tol, what):
    (o, s), grads = got
    (o_r, s_r), grads_r = want
    assert rel_err(o, o_r) < tol, f"{what}: output {rel_err(o, o_r)}"
    assert rel_err(s, s_r) < tol, f"{what}: final state {rel_err(s, s_r)}"
    for name, g, g_r in zip(("dq", "dk", "dv", "dlog_decay", "dinitial_state"), grads, grads_r):
        if g_r is None:
            assert g is None
            continue
        assert np.all(np.isfinite(np.asarray(g, np.float32))), f"{what}: {name} not finite"
        assert rel_err(g, g_r) < tol, f"{what}: {name} {rel_err(g, g_r)}"


@pytest.mark.parametrize("kind", ["none", "head", "data"])
def test_pallas_matches_reference_and_xla_fp32(kind):
    """b=2, h=2, t=40 (not a multiple of the chunk), adversarial decays, cotangents on both
    outputs, jitted: values and all five gradients within 1e-4 of the reference (relative to the
    largest reference entry; measured ~1e-6)."""
    args, cts = make_inputs(kind)
    got = values_and_grads(pallas_fn, args, cts)
    want = values_and_grads(linear_attention_reference, args, cts)
    check_close(got, want, 1e-4, f"fp32 {kind}")
    chunked = values_and_grads(
        lambda *a: linear_attention_xla(*a, chunk_size=CHUNK), args, cts)
    check_close(got, chunked, 1e-4, f"fp32 {kind} vs xla")


def test_pallas_matches_reference_bf16_inputs_f32_matmuls():
    """bf16 q, k, v with matmul_dtype=float32 (the reference path: f32 operands at HIGHEST, fp32
    state and accumulators): o and dq, dk, dv are rounded to bf16, one rounding step being
    2^-8 ~ 4e-3 of a value, so 1e-2 of the largest entry (measured: bf16 results identical to the
    reference's, fp32 ones within 3e-7). The bf16-operand path: test_pallas_tpu.py."""
    args, cts = make_inputs("data", dtype=jnp.bfloat16, t=48, seed=1)

    def f32_matmuls(q, k, v, d, s0):
        return linear_attention_pallas(q, k, v, d, s0, chunk_size=CHUNK, matmul_dtype=jnp.float32)

    got = values_and_grads(f32_matmuls, args, cts)
    want = values_and_grads(linear_attention_reference, args, cts)
    assert got[0][0].dtype == jnp.bfloat16 and got[0][1].dtype == jnp.float32
    check_close(got, want, 1e-2, "bf16 data")


def test_bad_inputs_raise_clear_errors():
    q = jnp.zeros((1, 8, 2, 8))
    with pytest.raises(ValueError, match="log_decay"):
        linear_attention_pallas(q, q, q, jnp.zeros((3,)))
    with pytest.raises(ValueError, match="initial_state"):
        linear_attention_pallas(q, q, q, None, jnp.zeros((1, 2, 8, 9)))
    with pytest.raises(ValueError, match="dtype"):
        linear_attention_pallas(q.astype(jnp.float16), q, q)
    with pytest.raises(ValueError, match="multiple of 128"):
        check_tiling(LinearAttentionBlocks(64, 16), 64, 128, 2, jnp.float32, "tpu")
    with pytest.raises(ValueError, match="sublane"):
        check_tiling(LinearAttentionBlocks(8, 8), 128, 128, 2, jnp.bfloat16, "tpu")
    check_tiling(LinearAttentionBlocks(64, 16), 256, 128, 4, jnp.bfloat16, "tpu")  # cosFormer2
    with pytest.raises(NotImplementedError, match="impl='xla'"):
        default_interpret("gpu")
    mode = default_interpret("cpu")  # CPU runs the TPU kernels in TPU interpret mode
    assert mode.out_of_bounds_reads == "raise" and mode.uninitialized_memory == "nan"


def test_kernels_lower_to_mosaic_for_tpu():
    """jax.export for platform "tpu" from this CPU host runs the Pallas -> Mosaic lowering of all
    24 kernels (3 decay kinds x without / with segment starts x forward, intra, dq sweep, reverse
    sweep; bf16, head dim 128). The Mosaic payloads, decoded, carry a cost estimate each, and every
    matmul takes bf16 operands with f32 accumulation except the data decay's log-decay range sums
    (a 0/1 [C, C] or [s*s, s] mask times float32 log decays, at fp32 contract precision). The
    Mosaic compiler itself (libtpu) is not available here."""
    from helpers.mosaic_payload import is_bf16, tpu_kernels

    b, t, h, d = 1, 256, 2, 128
    chunk, sub = 128, 16
    sds = jax.ShapeDtypeStruct

    def loss(q, k, v, head_decay, data_decay, s0, starts):
        total = 0.0
        for decay in (None, head_decay, data_decay):
            for st in (None, starts):
                o, s = linear_attention_pallas(q, k, v, decay, s0, st, chunk_size=chunk,
                                               interpret=False)
                total = total + jnp.sum(o.astype(jnp.float32)) + jnp.sum(s)
        return total

    step = jax.jit(jax.value_and_grad(loss, argnums=range(6)))
    act = sds((b, t, h, d), jnp.bfloat16)
    exported = jax.export.export(step, platforms=["tpu"])(
        act, act, act, sds((h,), jnp.float32), sds((b, t, h, d), jnp.float32),
        sds((b, h, d, d), jnp.float32), sds((b, t), jnp.bool_))
    mlir_text = exported.mlir_module()
    assert mlir_text.count("stablehlo.custom_call @tpu_custom_call") == 24
    kernels = tpu_kernels(mlir_text)
    assert len(kernels) == 24
    masks = {f"vector<{chunk}x{chunk}xf32>", f"vector<{sub * sub}x{sub}xf32>"}
    with_range_sums = 0
    for kern in kernels:
        cost = kern["cost_estimate"]
        assert cost and cost["flops"] > 0 and cost["bytes_accessed"] > 0, cost
        assert kern["matmuls"]
        f32 = [m for m in kern["matmuls"] if not is_bf16(m)]
        assert all(m[3] and m[0] in masks for m in f32), f32  # only the range sums stay f32
        assert any(is_bf16(m) for m in kern["matmuls"])
        with_range_sums += bool(f32)
    assert with_range_sums == 8  # the data decay's 4 kernels, without and with segments
    with pytest.raises(ValueError, match="multiple of 128"):
        linear_attention_pallas(jnp.zeros((1, 32, 2, 64)), jnp.zeros((1, 32, 2, 64)),
                                jnp.zeros((1, 32, 2, 64)), interpret=False)


def test_pallas_inside_shard_map_8_devices(tmp_path):
    """Batch x head sharded shard_map over 8 simulated CPU devices equals the unsharded kernel:
    outputs, final state and every gradient (helpers.pallas_shard_map_check measures them)."""
    out = tmp_path / "errors.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([_ROOT, os.path.join(_ROOT, "tests")]),
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8")
    res = subprocess.run([sys.executable, "-m", "helpers.pallas_shard_map_check", str(out)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    errors = json.loads(out.read_text())
    assert sorted(errors) == sorted(("o", "state", "dq", "dk", "dv", "dlog_decay", "ds0"))
    assert all(e < 1e-5 for e in errors.values()), errors
