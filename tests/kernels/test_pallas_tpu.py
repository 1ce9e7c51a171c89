"""The Pallas kernels at the MXU's rate: bf16 matmul operands with f32 accumulation against the
reference (values and gradients, every decay kind, with segments), what the kernels feed the MXU
(read from the jaxpr of each pallas_call), their cost estimates against a count of that jaxpr, and
the per-generation blocks with their VMEM budget.

Tolerance metric (flash-linear-attention's `get_err_ratio`): RMS(x - ref) / RMS(ref). fla's bf16 /
fp16 chunk kernels against their naive / recurrent code (tests/ops/test_gla.py, test_simple_gla.py,
fla-org/flash-linear-attention @ bc3b101): 0.004 for o, 0.005 for the final state and every
gradient (test_linear_attn.py: 0.001 for the ungated kernel). Ours use the same bounds; the inputs are
rounded to bf16 once and the reference runs on those values in float32, so the ratio measures the
kernels' own rounding (bf16 MXU operands, the bf16 output o). Kernels run in TPU interpret mode.
Legend: b batch, t sequence, h heads, k key dim, v value dim.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers.kernel_jaxpr import call_counts, kernel_dots, pallas_calls
from kernels_pallas import linear_attention, tpu
from kernels_pallas.linear_attention import config
from kernels_pallas.linear_attention.pallas import linear_attention_pallas

B, T, H, K, V, CHUNK = 2, 40, 2, 8, 16, 32  # two sub-chunks of 16 per chunk, a partial last chunk
SEGMENTS = np.array([[0] * 5 + [1] * 11 + [0] * 1 + [2] * 23,  # starts at 5, 16, 17 (inside chunks)
                     [3] * 32 + [4] * 8])  # a start on the chunk edge
NAMES = ("o", "final_state", "dq", "dk", "dv", "dlog_decay", "dinitial_state")
FLA = {"o": 0.004}  # fla's bound for o; 0.005 for everything else
# Outputs kept in float32 (state, log-decay and initial-state gradients): the split matmuls
# (pallas_chunk.mm_split) keep them near the f32 path; bound 1e-3 (measured <= 2e-4).
F32_OUTPUTS = {"final_state": 1e-3, "dlog_decay": 1e-3, "dinitial_state": 1e-3}


def err_ratio(x, ref) -> float:
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return float(np.sqrt(np.mean((x - ref) ** 2)) / (np.sqrt(np.mean(ref ** 2)) + 1e-8))


def inputs(kind, seed=0):
    """q, k, v, do rounded to bf16; log decays: none | per head (slow, fast) | log-sigmoid gates."""
    ks = jax.random.split(jax.random.PRNGKey(seed), 8)
    bf = lambda x: x.astype(jnp.bfloat16)  # noqa: E731
    q, k = bf(jax.random.normal(ks[0], (B, T, H, K))), bf(jax.random.normal(ks[1], (B, T, H, K)))
    v = bf(jax.random.normal(ks[2], (B, T, H, V)))
    decay = {"none": None, "head": jnp.array([-0.05, -1.0]),
             "data": jax.nn.log_sigmoid(2.0 + jax.random.normal(ks[3], (B, T, H, K)))}[kind]
    s0 = jax.random.normal(ks[4], (B, H, K, V))
    cts = (bf(jax.random.normal(ks[5], (B, T, H, V))), jax.random.normal(ks[6], (B, H, K, V)))
    return (q, k, v, decay, s0), cts


def run(impl, args, cts, dtype, **kw):
    """(o, final_state) and the VJP w.r.t. q, k, v, log_decay, initial_state, in `dtype`."""
    q, k, v, d, s0 = args

    @jax.jit
    def go(q, k, v, d, s0, do, ds):
        def fn(q, k, v, d, s0):
            if impl == "reference":
                return linear_attention(q, k, v, log_decay=d, initial_state=s0, impl="reference",
                                        segment_ids=jnp.asarray(SEGMENTS), return_final_state=True)
            starts = jnp.asarray(SEGMENTS[:, 1:] != SEGMENTS[:, :-1])
            starts = jnp.concatenate([jnp.zeros((B, 1), bool), starts], axis=1)
            return linear_attention_pallas(q, k, v, d, s0, starts, chunk_size=CHUNK, **kw)

        out, vjp = jax.vjp(fn, q, k, v, d, s0)
        return out, vjp((do.astype(dtype), ds))

    cast = lambda x: x.astype(dtype)  # noqa: E731
    return go(cast(q), cast(k), cast(v), d, s0, *cts)


def ratios(got, want) -> dict:
    (o, s), grads = got
    (o_r, s_r), grads_r = want
    out = {"o": err_ratio(o, o_r), "final_state": err_ratio(s, s_r)}
    for name, g, g_r in zip(NAMES[2:], grads, grads_r):
        if g_r is not None:
            assert np.all(np.isfinite(np.asarray(g, np.float32))), name
            out[name] = err_ratio(g, g_r)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["none", "head", "data"])
def test_bf16_matches_reference_within_fla_tolerances(kind):
    """bf16 q, k, v (bf16 MXU operands, f32 state and accumulators) with packed segments:
    values and all five gradients within fla's bf16 error ratios of the float32 reference (o, dq,
    dk, dv are bf16: their rounding alone is ~1.7e-3), the float32 outputs within 1e-3.
    Head dim 128 figures: bench/pallas_bf16_error.py, docs/results.md."""
    args, cts = inputs(kind)
    want = run("reference", args, cts, jnp.float32)
    got = run("pallas", args, cts, jnp.bfloat16)
    assert got[0][0].dtype == jnp.bfloat16 and got[0][1].dtype == jnp.float32
    measured = ratios(got, want)
    for name, r in measured.items():
        bound = min(FLA.get(name, 0.005), F32_OUTPUTS.get(name, 1.0))
        assert r < bound, f"{kind} {name}: error ratio {r:.5f} >= {bound} ({measured})"
    print(f"bf16 {kind}: " + ", ".join(f"{n} {r:.4f}" for n, r in measured.items()))
    # the f32 switch on the same bf16 inputs: only the bf16 outputs (o, dq, dk, dv) are rounded
    exact = ratios(run("pallas", args, cts, jnp.bfloat16, matmul_dtype=jnp.float32), want)
    rounded = ("o", "dq", "dk", "dv")
    assert max(exact[n] for n in rounded) < 0.003, exact
    assert max(r for n, r in exact.items() if n not in rounded) < 1e-5, exact


# --------------------------------------------------------------------------- what the MXU gets


def traced_step(kind, dtype, key_dim=128, value_dim=128, t=64, **kw):
    """make_jaxpr of value_and_grad of the kernels (with segments) at head dim 128."""
    sds = jax.ShapeDtypeStruct
    b, h = 1, 2
    decay = {"none": None, "head": sds((h,), jnp.float32),
             "data": sds((b, t, h, key_dim), jnp.float32)}[kind]

    def loss(q, k, v, d):
        o, s = linear_attention_pallas(q, k, v, d, None, jnp.zeros((b, t), bool), chunk_size=32,
                                       **kw)
        return jnp.sum(o.astype(jnp.float32)) + jnp.sum(s)

    qk, vv = sds((b, t, h, key_dim), dtype), sds((b, t, h, value_dim), dtype)
    argnums = (0, 1, 2) if decay is None else (0, 1, 2, 3)
    return jax.make_jaxpr(jax.value_and_grad(loss, argnums=argnums))(qk, qk, vv, decay)


@pytest.mark.parametrize("kind", ["none", "head", "data"])
def test_kernels_feed_the_mxu_bf16_and_keep_decay_sums_f32(kind):
    """bf16 inputs: every dot whose operands both come from q, k, v, do, the state or the decays
    takes bf16 operands with f32 accumulation (the split matmuls' hi and lo parts included); the
    only f32 dots are the data decay's range sums (a 0/1 mask times the float32 log decays) at
    HIGHEST. matmul_dtype=float32: every dot f32 at HIGHEST (the reference path), and fewer of
    them (no low parts)."""
    jaxpr = traced_step(kind, jnp.bfloat16)
    dots = [d for eqn in pallas_calls(jaxpr.jaxpr) for d in kernel_dots(eqn.params["jaxpr"])[0]]
    operand = [d for d in dots if not d[3]]
    masks = [d for d in dots if d[3]]
    assert operand and all(d[:2] == ("bfloat16", "bfloat16") and d[4] == jnp.float32
                           for d in operand), operand
    assert all(d[:2] == ("float32", "float32") and d[2] is not None for d in masks), masks
    assert bool(masks) == (kind == "data")
    f32 = traced_step(kind, jnp.bfloat16, matmul_dtype=jnp.float32)
    dots32 = [d for eqn in pallas_calls(f32.jaxpr) for d in kernel_dots(eqn.params["jaxpr"])[0]]
    assert 0 < len(dots32) < len(dots)  # bf16: the split matmuls' low-part passes on top
    assert all(d[:2] == ("float32", "float32") and d[2] is not None for d in dots32)


# --------------------------------------------------------------------------- cost estimates


@pytest.mark.parametrize("kind", ["none", "head", "data"])
def test_cost_estimates_match_a_count_of_the_kernel_jaxpr(kind):
    """Each pallas_call's pl.CostEstimate (a hand formula of the shapes, cost.py) equals an
    independent count: dot FLOPs and exp evaluations of the kernel's jaxpr times the grid size, and
    the bytes of every operand and output of the call. cosFormer2's k = 256 for none, 128 else."""
    key_dim = 256 if kind == "none" else 128
    jaxpr = traced_step(kind, jnp.bfloat16, key_dim=key_dim, t=96)
    calls = list(pallas_calls(jaxpr.jaxpr))
    assert len(calls) == 4  # forward, intra, dq sweep, reverse sweep
    for eqn in calls:
        est = eqn.params["cost_estimate"]
        counted = call_counts(eqn)
        assert (est.flops, est.transcendentals, est.bytes_accessed) == counted, \
            (eqn.params["name"], est, counted)


# --------------------------------------------------------------------------- blocks per generation


def test_device_kinds_name_generations_and_blocks():
    assert tpu.generation("TPU v4").name == "v4"
    assert tpu.generation("TPU v5 lite").name == "v5e" == tpu.generation("TPU v5e").name
    assert tpu.generation("TPU v5p").name == "v5p" == tpu.generation("TPU v5").name
    assert tpu.generation("TPU v6 lite").name == "v6e" == tpu.generation("TPU v6e").name
    assert tpu.generation("cpu") is None and tpu.generation(None) is None
    blocks = {name: config.default_blocks("tpu", kind)
              for name, kind in (("v4", "TPU v4"), ("v5e", "TPU v5 lite"), ("v5p", "TPU v5p"),
                                 ("v6e", "TPU v6 lite"))}
    assert {n: (b.chunk_size, b.sub_chunk, b.grid_order) for n, b in blocks.items()} == {
        "v4": (128, 16, "hbn"), "v5e": (128, 16, "bhn"), "v5p": (128, 16, "hbn"),
        "v6e": (256, 32, "bhn")}
    for name, b in blocks.items():  # the chunk fills the MXU; megacore chips lead with heads
        gen = tpu.GENERATIONS[name]
        assert b.chunk_size == gen.mxu and (b.grid_order == "hbn") == (gen.tensorcores == 2)
    assert config.default_blocks("tpu", "TPU v9 future") == config.DEFAULTS["tpu"]
    assert config.default_blocks("cpu") == config.DEFAULTS["cpu"]  # interpret mode: unchanged


def test_vmem_budget_arithmetic():
    """The estimate by hand for the v5p forward kernel at k = 256, v = 128, bf16 inputs, data decay
    with segments, and every generation's row inside half its limit, the limit inside the VMEM."""
    b = config.TPU_BLOCKS["v5p"]
    c, k, v, s = 128, 256, 128, 16
    blocks_in = c * k * 4 + c * 128 * 4 + 2 * c * k * 2 + c * v * 2 + v * k * 4  # g, seg, q, k, v, s0
    blocks_out = c * v * 2 + v * k * 4  # o, final state
    temps = 6 * c * c * 4 + 8 * c * k * 4 + 4 * s * s * k * 4
    want = 2 * (blocks_in + blocks_out) + v * k * 4 + temps
    assert config.vmem_bytes(b, k, v, 2)["forward"] == want == 3_932_160
    for name, blocks in config.TPU_BLOCKS.items():
        need = max(config.vmem_bytes(blocks, 256, 128, 2).values())
        assert 2 * need <= blocks.vmem_limit_bytes <= tpu.GENERATIONS[name].vmem_bytes, name
    with pytest.raises(ValueError, match="VMEM"):
        config.check_vmem(config.TPU_BLOCKS["v4"].with_chunk_size(1024), 256, 128, 2, True, True)
    with pytest.raises(ValueError, match="grid_order"):
        config.LinearAttentionBlocks(grid_order="nbh")


def test_grid_order_hbn_matches_bhn():
    """The heads-first grid (megacore rows) gives the same values and gradients."""
    (q, k, v, d, s0), cts = inputs("head")
    base = config.LinearAttentionBlocks(chunk_size=CHUNK, sub_chunk=16)
    hbn = config.LinearAttentionBlocks(chunk_size=CHUNK, sub_chunk=16, grid_order="hbn")
    a = run("pallas", (q, k, v, d, s0), cts, jnp.float32, blocks=base)
    b = run("pallas", (q, k, v, d, s0), cts, jnp.float32, blocks=hbn)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
