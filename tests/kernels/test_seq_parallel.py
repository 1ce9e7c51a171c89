"""Sequence-parallel (LASP-style) linear attention on 8 simulated CPU devices equals the unsharded
reference: values and gradients (q, k, v, log_decay, initial_state; cotangents on o and the final
state) for every decay kind, without and with packed documents (segment_ids: starts on a shard
boundary, inside shards, two in one shard, a repeated id), with the sequence on 'seq' and, in one
mesh, batch on 'data' and heads on 'tensor'. The checks run in a fresh subprocess so XLA_FLAGS takes effect before jax is imported.

Legend: b batch, t sequence, h heads, k key dim, v value dim."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOL = 2e-5  # max |sharded - reference| / max(1, max |reference|)

SCRIPT = textwrap.dedent(
    """
    import json
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh
    from kernels_pallas import linear_attention
    from kernels_pallas.linear_attention.seq_parallel import linear_attention_seq_parallel

    assert jax.device_count() == 8, jax.devices()
    b, t, h, dk, dv = 2, 72, 2, 4, 3  # 9 tokens per shard on 8 shards, chunk 4: padded chunks
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal(s), jnp.float32)
               for s in ((b, t, h, dk), (b, t, h, dk), (b, t, h, dv)))
    s0 = jnp.asarray(rng.standard_normal((b, h, dk, dv)), jnp.float32)
    cot = (jnp.asarray(rng.standard_normal((b, t, h, dv)), jnp.float32),
           jnp.asarray(rng.standard_normal((b, h, dk, dv)), jnp.float32))
    data = -np.logaddexp(0.0, 1.0 - 4.0 * rng.uniform(size=(b, t, h, dk)))  # log_sigmoid
    data[:, 20:30] = -20.0  # strong decay across a shard boundary (18)
    data[:, 40:52] = -1e-3  # near-0 decay
    data[:, 45] = -60.0  # an extreme decay
    seg = np.zeros((b, t), np.int32)
    seg[0, 18:] = 1; seg[0, 40:] = 2; seg[0, 43:] = 1; seg[0, 70:] = 3  # shard edge 18; 40, 43 in one
    seg[1, 5:] = 7; seg[1, 63:] = 8  # first shard; shard edge 63
    seg = jnp.asarray(seg)
    decays = {"none": None, "head": jnp.array([-0.05, -3.0]),
              "data": jnp.asarray(data, jnp.float32)}
    devs = np.array(jax.devices())
    mesh3 = Mesh(devs.reshape(2, 2, 2), ("data", "seq", "tensor"))
    meshes = {"seq8": (Mesh(devs, ("seq",)), None), "data2-seq2-tensor2": (mesh3, "tensor")}

    def values_and_grads(fn, ld):
        out, vjp = jax.vjp(fn, q, k, v, ld, s0)
        return jax.tree.leaves((out, vjp(cot)))

    def rel_err(x, ref):
        x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
        if not np.all(np.isfinite(x)):
            return float("inf")
        return float(np.max(np.abs(x - ref)) / max(1.0, float(np.max(np.abs(ref)))))

    results = {}
    for (kind, ld), ids in [(kd, ids) for kd in decays.items() for ids in (None, seg)]:
        tag = kind + ("+segments" if ids is not None else "")
        ref = jax.jit(lambda ld: values_and_grads(
            lambda q, k, v, ld, s0: linear_attention(
                q, k, v, log_decay=ld, segment_ids=ids, initial_state=s0,
                return_final_state=True, impl="reference"),
            ld))(ld)
        for name, (mesh, head_axis) in meshes.items():
            if name != "seq8" and kind != "data":
                continue  # batch/head sharding: one kind is enough (same code path)
            sp = jax.jit(lambda ld: values_and_grads(
                lambda q, k, v, ld, s0: linear_attention_seq_parallel(
                    q, k, v, log_decay=ld, segment_ids=ids, initial_state=s0,
                    return_final_state=True, mesh=mesh, head_axis=head_axis, impl="xla",
                    chunk_size=4),
                ld))(ld)
            results[f"{tag}/{name}"] = [rel_err(x, r) for x, r in zip(sp, ref)]

    mesh = meshes["seq8"][0]
    try:
        linear_attention_seq_parallel(q[:, :60], k[:, :60], v[:, :60], mesh=mesh)
        results["error"] = "no error"
    except ValueError as e:
        results["error"] = str(e)
    print("RESULTS" + json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ)
    env.update(
        XLA_FLAGS=env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULTS")][-1]
    return json.loads(line[len("RESULTS"):])


NAMES = ("o", "final_state", "dq", "dk", "dv", "dlog_decay", "dinitial_state")


@pytest.mark.parametrize(
    "case", [f"{kind}{seg}/{mesh}" for seg in ("", "+segments")
             for kind, mesh in (("none", "seq8"), ("head", "seq8"), ("data", "seq8"),
                                ("data", "data2-seq2-tensor2"))]
)
def test_seq_parallel_matches_unsharded(results, case):
    errs = results[case]
    names = [n for n in NAMES if not (case.startswith("none") and n == "dlog_decay")]
    assert len(errs) == len(names)
    bad = {n: e for n, e in zip(names, errs) if not e <= TOL}
    assert not bad, f"{case}: errors above {TOL}: {bad}"


def test_seq_parallel_rejects_indivisible_length(results):
    assert "not divisible by the 8 shards" in results["error"]
