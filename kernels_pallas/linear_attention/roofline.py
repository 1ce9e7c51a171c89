"""Roofline of the linear-attention kernels (and of a flash softmax-attention kernel beside them) on
a TPU generation, on paper: FLOPs and HBM bytes from the kernels' own cost estimates.

    Cost(name, flops, bytes, transcendentals)     one kernel call (or a sum of calls)
    roofline(cost, gen) -> dict                   time = max(flops / peak, bytes / bandwidth)
    linear_attention_costs(kind, b, t, h, k, v, blocks=None, segments=True)
        -> [Cost] of forward, intra, dq sweep, reverse sweep: read from the pl.CostEstimate each
           pallas_call of value_and_grad(linear_attention_pallas) carries (traced, not run)
    flash_attention_costs(b, t, h, e) -> [Cost] of causal softmax attention forward and backward

The flash model (FlashAttention-2's algorithm, causal: p = t(t+1)/2 query-key pairs per head):
forward QKᵀ and PV 4pe FLOPs, exp p, reads q, k, v and writes o (bf16) and the row log-sum-exp
(f32); backward recomputes P and forms dV, dP, dQ, dK: 10pe FLOPs, exp p, reads q, k, v, o, do,
lse and writes dq, dk, dv. Legend: b batch, t sequence, h heads, k key dim, v / e value dim.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from kernels_pallas.linear_attention.kind import DecayKind
from kernels_pallas.tpu import TpuGeneration


@dataclasses.dataclass(frozen=True)
class Cost:
    name: str
    flops: float
    bytes: float
    transcendentals: float = 0.0

    def __mul__(self, n: float) -> "Cost":
        return Cost(self.name, self.flops * n, self.bytes * n, self.transcendentals * n)

    __rmul__ = __mul__

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.name, self.flops + other.flops, self.bytes + other.bytes,
                    self.transcendentals + other.transcendentals)


def roofline(cost: Cost, gen: TpuGeneration) -> dict:
    """Time on one chip of `gen` at its peak bf16 rate or its HBM bandwidth, whichever binds."""
    t_flops, t_bytes = cost.flops / gen.peak_bf16_flops, cost.bytes / gen.hbm_bytes_per_s
    return {"name": cost.name, "flops": cost.flops, "bytes": cost.bytes,
            "intensity": cost.flops / cost.bytes if cost.bytes else float("inf"),
            "time_s": max(t_flops, t_bytes), "bound": "compute" if t_flops >= t_bytes else "memory"}


def _pallas_calls(jaxpr, mult=1):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn, mult
        inner = mult * eqn.params.get("length", 1)  # a scan repeats its body
        for val in eqn.params.values():
            for x in (val if isinstance(val, (tuple, list)) else [val]):
                sub = x if hasattr(x, "eqns") else getattr(x, "jaxpr", None)
                if sub is not None and hasattr(sub, "eqns"):
                    yield from _pallas_calls(sub, inner)


def pallas_costs(fn, *args) -> list[Cost]:
    """Every pallas_call that `fn(*args)` would run, with its cost estimate (abstract trace)."""
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    out = []
    for eqn, mult in _pallas_calls(jaxpr):
        est = eqn.params["cost_estimate"]
        if est is None:
            raise ValueError(f"pallas_call {eqn.params['name']} carries no cost estimate.")
        out.append(mult * Cost(eqn.params["name"], est.flops, est.bytes_accessed,
                               est.transcendentals))
    return out


def linear_attention_costs(kind: DecayKind, b: int, t: int, h: int, key_dim: int, value_dim: int,
                           blocks=None, segments: bool = True, dtype=jnp.bfloat16) -> list[Cost]:
    """Forward + backward kernel costs of one linear_attention(impl="pallas") call."""
    from kernels_pallas.linear_attention.config import TPU_BLOCKS
    from kernels_pallas.linear_attention.pallas import linear_attention_pallas

    kind = DecayKind(kind)
    blocks = blocks or TPU_BLOCKS["v5p"]
    sds = jax.ShapeDtypeStruct
    decay = {DecayKind.NONE: None, DecayKind.HEAD: sds((h,), jnp.float32),
             DecayKind.DATA: sds((b, t, h, key_dim), jnp.float32)}[kind]
    starts = sds((b, t), jnp.bool_) if segments else None

    def loss(q, k, v, d, starts):
        o, s = linear_attention_pallas(q, k, v, d, None, starts, blocks=blocks, interpret=False)
        return jnp.sum(o.astype(jnp.float32)) + jnp.sum(s)

    qk, vv = sds((b, t, h, key_dim), dtype), sds((b, t, h, value_dim), dtype)
    argnums = (0, 1, 2) if decay is None else (0, 1, 2, 3)
    return pallas_costs(jax.grad(loss, argnums=argnums), qk, qk, vv, decay, starts)


def flash_attention_costs(b: int, t: int, h: int, e: int, itemsize: int = 2) -> list[Cost]:
    """Causal softmax attention (flash algorithm), forward and backward, see the module docstring."""
    pairs = b * h * t * (t + 1) / 2
    act = b * t * h * e * itemsize  # one of q, k, v, o, do, dq, dk, dv
    lse = b * t * h * 4
    return [Cost("flash_forward", 4 * pairs * e, 3 * act + act + lse, pairs),
            Cost("flash_backward", 10 * pairs * e, 5 * act + lse + 3 * act, pairs)]


def total(costs, name: str) -> Cost:
    """The sum of several costs under one name."""
    out = Cost(name, 0.0, 0.0, 0.0)
    for c in costs:
        out = out + c
    return dataclasses.replace(out, name=name)
