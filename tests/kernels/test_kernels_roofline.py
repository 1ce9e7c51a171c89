"""The kernel roofline (kernels_pallas.linear_attention.roofline): the time model, and the kernel
costs it reads from the pallas_calls against hand counts. Legend: b batch, t sequence, h heads,
k key dim, v value dim, c chunk, e head dim."""

import jax.numpy as jnp
import pytest

from kernels_pallas import tpu
from kernels_pallas.linear_attention import roofline as kr
from kernels_pallas.linear_attention.config import TPU_BLOCKS


def test_roofline_time_is_the_slower_of_compute_and_memory():
    gen = tpu.GENERATIONS["v5p"]
    assert gen.ridge == pytest.approx(459e12 / 2765e9)
    flops = 1e12
    at_ridge = kr.Cost("x", flops, flops / gen.ridge)
    r = kr.roofline(at_ridge, gen)
    assert r["time_s"] == pytest.approx(flops / 459e12) and r["intensity"] == pytest.approx(gen.ridge)
    mem = kr.roofline(kr.Cost("m", flops, 10 * flops / gen.ridge), gen)
    assert mem["bound"] == "memory" and mem["time_s"] == pytest.approx(10 * flops / 459e12)
    assert kr.roofline(kr.Cost("c", flops, flops / gen.ridge / 10), gen)["bound"] == "compute"


@pytest.mark.parametrize("kind", ["none", "head"])
def test_linear_kernel_forward_flops_are_the_chunked_count(kind):
    """The forward kernel's estimate at the paper's shapes (b=2, t=1024, h=4, k=v=128, chunk 128)
    equals the chunked form's count per token and head: 2c(k + v) within the chunk, 2kv to read
    the state and 2kv to update it, plus (head decay, bf16) 2kv for the low part of the decayed
    keys in the state update; the four kernels' bytes cover at least q, k, v, o and their
    gradients once."""
    b, t, h, k, v = 2, 1024, 4, 128, 128
    c = TPU_BLOCKS["v5p"].chunk_size
    costs = {x.name: x for x in kr.linear_attention_costs(kind, b, t, h, k, v, segments=False)}
    assert sorted(costs) == ["linear_attention_dq", "linear_attention_forward",
                             "linear_attention_intra", "linear_attention_reverse"]
    low = 2 * k * v if kind == "head" else 0
    assert costs["linear_attention_forward"].flops == b * t * h * (2 * c * (k + v) + 4 * k * v + low)
    assert sum(x.bytes for x in costs.values()) > 2 * (2 * b * t * h * (2 * k + 2 * v))
    doubled = {x.name: x for x in kr.linear_attention_costs(kind, b, 2 * t, h, k, v, segments=False)}
    for name, cost in costs.items():  # linear in the sequence length
        assert doubled[name].flops == 2 * cost.flops


def test_flash_attention_costs():
    b, t, h, e = 1, 8, 2, 4
    fwd, bwd = kr.flash_attention_costs(b, t, h, e)
    pairs = b * h * t * (t + 1) / 2
    assert fwd.flops == 4 * pairs * e and bwd.flops == 10 * pairs * e
    assert fwd.bytes == 4 * b * t * h * e * 2 + b * t * h * 4  # q, k, v read, o written, lse
    assert kr.flash_attention_costs(b, 2 * t, h, e)[0].flops == pytest.approx(
        4 * b * h * (2 * t) * (2 * t + 1) / 2 * e)


def test_pallas_costs_refuses_a_call_without_estimate():
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def fn(x):
        return pl.pallas_call(kernel, out_shape=jnp.zeros((8, 128)), interpret=True)(x)

    with pytest.raises(ValueError, match="no cost estimate"):
        kr.pallas_costs(fn, jnp.zeros((8, 128)))
