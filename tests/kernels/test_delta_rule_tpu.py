"""The delta rule's Pallas kernels for TPU, checked from this CPU host: lowered to Mosaic
(jax.export for platform "tpu") and inspected (bf16 MXU operands with f32 accumulation, a cost
estimate per kernel); every cost estimate against a count of the kernel jaxpr; the blocks per TPU
generation, their VMEM budget and the tiling errors. Nothing here runs a kernel.
Legend: b batch, t sequence, h heads, k key dim, v value dim."""

import jax
import jax.numpy as jnp
import pytest

from helpers.kernel_jaxpr import call_counts, pallas_calls
from helpers.mosaic_payload import is_bf16, tpu_kernels
from kernels_pallas import tpu
from kernels_pallas.delta_rule import config
from kernels_pallas.delta_rule.pallas import delta_rule_pallas

sds = jax.ShapeDtypeStruct


def test_kernels_lower_to_mosaic_for_tpu():
    """value_and_grad of the kernels at head dim 128, bf16, chunk 64 (the v5p row), gated and
    ungated, with and without segments: 4 x 3 kernels (forward; state sweep and reverse sweep of
    the backward). Each decoded Mosaic kernel carries its cost estimate; every matmul takes bf16
    operands with f32 accumulation except the gate's log-decay range sums ([C, C] 0/1 mask times
    f32 log decays at fp32 contract precision: one per gated forward, two per gated reverse sweep,
    none in the state sweep, which reads the forward's T). The Mosaic compiler itself (libtpu) is
    not available here."""
    b, t, h, d, c = 1, 256, 2, 128, 64

    def loss(q, k, v, beta, g, s0, starts):
        total = 0.0
        for gate in (None, g):
            for st in (None, starts):
                o, s = delta_rule_pallas(q, k, v, beta, gate, s0, st, interpret=False,
                                         blocks=config.TPU_BLOCKS["v5p"])
                total = total + jnp.sum(o.astype(jnp.float32)) + jnp.sum(s)
        return total

    act = sds((b, t, h, d), jnp.bfloat16)
    col = sds((b, t, h), jnp.float32)
    exported = jax.export.export(jax.jit(jax.value_and_grad(loss, argnums=range(6))),
                                 platforms=["tpu"])(
        act, act, act, col, col, sds((b, h, d, d), jnp.float32), sds((b, t), jnp.bool_))
    mlir_text = exported.mlir_module()
    kernels = tpu_kernels(mlir_text)
    assert len(kernels) == mlir_text.count("stablehlo.custom_call @tpu_custom_call") == 12
    range_sums = []
    for kern in kernels:
        cost = kern["cost_estimate"]
        assert cost and cost["flops"] > 0 and cost["bytes_accessed"] > 0, cost
        f32 = [m for m in kern["matmuls"] if not is_bf16(m)]
        assert all(m[0] == m[1] == f"vector<{c}x{c}xf32>" and m[3] for m in f32), f32
        assert sum(is_bf16(m) for m in kern["matmuls"]) >= 10
        range_sums.append((len(f32), cost["transcendentals"] > 0))
    # (range sums, exps): ungated x 6; gated state sweeps, forwards, reverse sweeps x 2 each
    assert sorted(range_sums) == [(0, False)] * 6 + [(0, True), (0, True), (1, True), (1, True),
                                                     (2, True), (2, True)]
    with pytest.raises(ValueError, match="multiple of 128"):
        x = jnp.zeros((1, 32, 2, 64))
        delta_rule_pallas(x, x, x, jnp.zeros((1, 32, 2)), interpret=False)


def traced(gated, segments, dtype, matmul_dtype=None, b=1, t=96, h=2, k=128, v=64):
    def loss(q, kk, vv, beta, g):
        o, s = delta_rule_pallas(q, kk, vv, beta, g if gated else None, None,
                                 jnp.zeros((b, t), bool) if segments else None, chunk_size=32,
                                 matmul_dtype=matmul_dtype)
        return jnp.sum(o.astype(jnp.float32)) + jnp.sum(s)

    return jax.make_jaxpr(jax.grad(loss, argnums=range(5)))(
        sds((b, t, h, k), dtype), sds((b, t, h, k), dtype), sds((b, t, h, v), dtype),
        sds((b, t, h), jnp.float32), sds((b, t, h), jnp.float32))


@pytest.mark.parametrize("gated,segments,dtype,matmul_dtype", [
    (True, True, jnp.bfloat16, None), (False, False, jnp.bfloat16, None),
    (True, False, jnp.float32, None), (False, True, jnp.float32, jnp.bfloat16)])
def test_cost_estimates_match_a_count_of_the_kernel_jaxpr(gated, segments, dtype, matmul_dtype):
    """Each pallas_call's pl.CostEstimate (cost.py, a formula of the shapes) equals an independent
    count: the dot FLOPs (every split pass) and exps of the kernel jaxpr times the grid, and the
    bytes of every operand and output. k = 128, v = 64, chunk 32, t = 96 (3 chunks)."""
    calls = list(pallas_calls(traced(gated, segments, dtype, matmul_dtype).jaxpr))
    assert sorted(e.params["name"] for e in calls) == [
        "delta_rule_forward", "delta_rule_reverse", "delta_rule_states"]
    for eqn in calls:
        est = eqn.params["cost_estimate"]
        counted = call_counts(eqn)
        assert (est.flops, est.transcendentals, est.bytes_accessed) == counted, \
            (eqn.params["name"], est, counted)


def test_blocks_per_generation_and_vmem():
    """The chunk is 64 (v6e: 128), megacore chips lead with heads; every row's largest kernel at
    k = v = 256, bf16, gated with segments fits half its VMEM limit, the limit inside the VMEM;
    a chunk that is not a power of two and a chunk too large for VMEM are refused clearly."""
    rows = {name: config.default_blocks("tpu", kind) for name, kind in (
        ("v4", "TPU v4"), ("v5e", "TPU v5 lite"), ("v5p", "TPU v5p"), ("v6e", "TPU v6 lite"))}
    assert {n: (b.chunk_size, b.grid_order) for n, b in rows.items()} == {
        "v4": (64, "hbn"), "v5e": (64, "bhn"), "v5p": (64, "hbn"), "v6e": (128, "bhn")}
    for name, blocks in rows.items():
        need = max(config.vmem_bytes(blocks, 256, 256, 2).values())
        assert 2 * need <= blocks.vmem_limit_bytes <= tpu.GENERATIONS[name].vmem_bytes, name
    assert config.default_blocks("tpu", "TPU v9 future") == config.DEFAULTS["tpu"]
    assert config.default_chunk_size("pallas", "cpu") == config.DEFAULTS["cpu"].chunk_size
    for key_dim, chunk in ((8, 16), (16, 16), (20, 32), (64, 32), (128, 32)):  # CPU: [16, 32]
        assert config.default_chunk_size("xla", "cpu", key_dim=key_dim) == chunk
    assert config.default_chunk_size("xla", "tpu", key_dim=16) == 64
    assert config.xla_block_len(16, "cpu") == 512 and config.xla_block_len(64, "tpu") is None
    with pytest.raises(ValueError, match="power of two"):
        config.DeltaRuleBlocks(48)
    with pytest.raises(ValueError, match="VMEM"):
        config.check_vmem(config.DeltaRuleBlocks(1024, vmem_limit_bytes=16 << 20), 256, 256, 2,
                          True, True)
    with pytest.raises(ValueError, match="sublane"):
        config.check_tiling(8, 128, 128, 2, jnp.bfloat16, "tpu")
    config.check_tiling(64, 64, 64, 1, jnp.bfloat16, "tpu")  # one head: the block is the array


def test_pallas_bad_inputs_raise_clear_errors():
    x = jnp.zeros((1, 32, 2, 8))
    beta = jnp.zeros((1, 32, 2))
    with pytest.raises(ValueError, match=r"^delta_rule: beta must be a float array \[b, t, h\]"):
        delta_rule_pallas(x, x, x, beta[..., None])
    with pytest.raises(ValueError, match="delta_rule_pallas: q has dtype float16"):
        delta_rule_pallas(x.astype(jnp.float16), x, x, beta)
    with pytest.raises(ValueError, match="matmul_dtype=float16"):
        delta_rule_pallas(x, x, x, beta, matmul_dtype=jnp.float16)
