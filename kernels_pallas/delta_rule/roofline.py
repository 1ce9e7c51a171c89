"""Roofline of the delta-rule kernels on a TPU generation, on paper: FLOPs and HBM bytes read from
the cost estimate each pallas_call of value_and_grad(delta_rule_pallas) carries (traced, not run).

    delta_rule_costs(b, t, h, k, v, gated=True, segments=True, blocks=None, dtype=bf16)
        -> [Cost] of the forward, the state sweep and the reverse sweep

Cost, roofline(cost, gen) and total(costs, name): linear_attention.roofline. Legend: b batch,
t sequence, h heads, k key dim, v value dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels_pallas.linear_attention.roofline import Cost, pallas_costs


def delta_rule_costs(b: int, t: int, h: int, key_dim: int, value_dim: int, gated: bool = True,
                     segments: bool = True, blocks=None, dtype=jnp.bfloat16) -> list[Cost]:
    """Forward + backward kernel costs of one delta_rule(impl="pallas") call (blocks: default the
    v5p row of config.TPU_BLOCKS)."""
    from kernels_pallas.delta_rule.config import TPU_BLOCKS
    from kernels_pallas.delta_rule.pallas import delta_rule_pallas

    blocks = blocks or TPU_BLOCKS["v5p"]
    sds = jax.ShapeDtypeStruct
    col = sds((b, t, h), jnp.float32)
    starts = sds((b, t), jnp.bool_) if segments else None

    def loss(q, k, v, beta, g, starts):
        o, s = delta_rule_pallas(q, k, v, beta, g if gated else None, None, starts, blocks=blocks,
                                 interpret=False)
        return jnp.sum(o.astype(jnp.float32)) + jnp.sum(s)

    qk, vv = sds((b, t, h, key_dim), dtype), sds((b, t, h, value_dim), dtype)
    argnums = (0, 1, 2, 3, 4) if gated else (0, 1, 2, 3)
    return pallas_costs(jax.grad(loss, argnums=argnums), qk, qk, vv, col, col, starts)
