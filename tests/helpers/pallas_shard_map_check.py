"""Run by tests/kernels/test_pallas_linear_attention.py (and, with the argument delta_rule, by
test_delta_rule_pallas.py) with XLA_FLAGS=--xla_force_host_platform_device_count=8: the Pallas
kernels inside shard_map over a (batch=2, heads=4) mesh of 8 CPU devices against the unsharded
kernel call, values and gradients.

    python -m helpers.pallas_shard_map_check OUT [linear_attention | delta_rule]
        # OUT: {output or gradient: relative error}
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from kernels_pallas.delta_rule.pallas import delta_rule_pallas
from kernels_pallas.linear_attention.config import LinearAttentionBlocks
from kernels_pallas.linear_attention.pallas import linear_attention_pallas

assert "device_count=8" in os.environ.get("XLA_FLAGS", ""), "run with 8 simulated devices"
B, T, H, K, V, CHUNK = 2, 24, 4, 8, 8, 16


def kernel(q, k, v, d, s0):
    return linear_attention_pallas(q, k, v, d, s0, chunk_size=CHUNK,
                                   blocks=LinearAttentionBlocks(chunk_size=CHUNK, sub_chunk=8))


def delta_kernel(q, k, v, beta, g, s0):
    return delta_rule_pallas(q, k, v, beta, g, s0, chunk_size=CHUNK)


def main():
    assert jax.device_count() == 8, jax.devices()
    delta = sys.argv[2:] == ["delta_rule"]
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("batch", "heads"))
    act, state = P("batch", None, "heads", None), P("batch", "heads", None, None)
    ks = jax.random.split(jax.random.PRNGKey(0), 8)
    q, k = (jax.random.normal(x, (B, T, H, K)) for x in ks[:2])
    v = jax.random.normal(ks[2], (B, T, H, V))
    s0 = jax.random.normal(ks[4], (B, H, K, V))
    cts = (jax.random.normal(ks[5], (B, T, H, V)), jax.random.normal(ks[6], (B, H, K, V)))
    if delta:  # beta [b, t, h] and the per-token log decay [b, t, h]; L2-normalised keys
        fn, col = delta_kernel, P("batch", None, "heads")
        k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
        args = (q, k, v, jax.nn.sigmoid(jax.random.normal(ks[7], (B, T, H))),
                jax.nn.log_sigmoid(2.0 + jax.random.normal(ks[3], (B, T, H))), s0)
        specs, names = (act, act, act, col, col, state), ("dbeta", "dlog_decay", "ds0")
    else:
        fn = kernel
        d = jax.nn.log_sigmoid(1.0 + 3.0 * jax.random.normal(ks[3], (B, T, H, K)))
        args = (q, k, v, d.at[:, 5].set(-60.0), s0)
        specs, names = (act, act, act, act, state), ("dlog_decay", "ds0")
    sharded = jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=(act, state))

    def values_and_grads(fn):
        @jax.jit
        def run(*args):
            out, vjp = jax.vjp(fn, *args)
            return out, vjp(cts)
        return run(*args)

    got, want = values_and_grads(sharded), values_and_grads(fn)
    errors = {name: float(jnp.max(jnp.abs(x - y)) / (jnp.max(jnp.abs(y)) + 1e-30)) for name, x, y
              in zip(("o", "state", "dq", "dk", "dv") + names, jax.tree.leaves(got),
                     jax.tree.leaves(want))}
    with open(sys.argv[1], "w") as f:
        json.dump(errors, f)


if __name__ == "__main__":
    main()
