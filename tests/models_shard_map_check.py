"""Run by test_models_shard_map with XLA_FLAGS=--xla_force_host_platform_device_count=8.

    python tests/models_shard_map_check.py equal [impl]   # sharded == unsharded, values + grads
    python tests/models_shard_map_check.py tpu            # the sharded train step lowered for TPU
    python tests/models_shard_map_check.py conv           # `equal` with model.short_conv=4, one mesh

`equal`: for TNL, HGRN2 and cosFormer2 and every mesh below (including 'seq' > 1, the LASP form),
the loss and every parameter gradient of the trainer's sharded forward (parameters sharded by
linscale_jax.dist.sharding, the kernels inside jax.shard_map) equal the unsharded model's, with packed
documents whose boundaries fall inside and at the edge of sequence shards.
`tpu`: jax.export of the trainer's sharded train step for platform "tpu" (impl="pallas",
bf16, head dim 128) from this CPU host; every Mosaic custom call must sit inside an
sdy.manual_computation (shard_map) region, carry a cost estimate, and feed its matmuls bf16
operands (f32 accumulation) except the data decay's log-decay range sums (0/1 mask x f32, fp32
contract precision; tests/mosaic_payload.py decodes the kernels). The same step compiled for the 8 CPU devices
(same SPMD partitioner, impl="xla") must hold no all-gather of a [b, t, h, e] kernel operand
(q, k, v or the decay); the gathers left are parameters, the LASP shard states and, for
cosFormer2, its TPE output [b, t, d] (head-sharded; a note for #15's TPE).
Prints OK on success, raises otherwise.
"""

import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from linscale_jax.dist import sharding
from linscale_jax.train import loop as trainer
from linscale_jax.config import base_config
from linscale_jax.models import ModelConfig, build_model

assert "device_count=8" in os.environ.get("XLA_FLAGS", ""), "run with 8 simulated devices"
ARCHS = ("tnl", "hgrn2", "cosformer2")
# (data, fsdp, tensor, seq)
MESHES = ((8, 1, 1, 1), (2, 2, 2, 1), (2, 1, 2, 2), (1, 1, 2, 4))
B, T = 8, 32


def config(arch, mesh, impl, **model):
    c = base_config()
    c.model.update(arch=arch, n_layers=2, d_model=32, n_heads=4, ffn_dim=64, vocab_size=64,
                   max_seq_len=T, impl=impl, chunk_size=8, init_std=0.2)
    c.model.update(**model)
    c.mesh.update(data=mesh[0], fsdp=mesh[1], tensor=mesh[2], seq=mesh[3])
    c.train.update(batch_size=B, seq_len=T, steps=10)
    return c


def batch():
    rng = np.random.default_rng(0)
    toks = rng.integers(0, 64, (B, T + 1)).astype(np.int32)
    # documents: a boundary inside a shard, one exactly at T/2 and T/4 (edges of seq shards)
    seg = np.ones((B, T), np.int32)
    seg[:, 5:] += 1
    seg[:, T // 4:] += 1
    seg[:, T // 2:] += 1
    seg[1::2, 20:] += 1
    return dict(inputs=toks[:, :-1], targets=toks[:, 1:], segment_ids=seg,
                weights=np.ones((B, T), np.float32))


def loss_fn(graphdef, rest):
    def f(p, b):
        l, w = trainer.loss_sums(nnx.merge(graphdef, p, rest), b)
        return l / w

    return jax.value_and_grad(f)


def rel_err(x, y):
    return float(jnp.max(jnp.abs(x - y)) / (jnp.max(jnp.abs(y)) + 1e-30))


def check_equal(impl, meshes=MESHES, **model_fields):
    data = batch()
    for arch in ARCHS:
        c0 = config(arch, (1, 1, 1, 1), impl, **model_fields)
        model = build_model(ModelConfig.from_config(c0.model), rngs=nnx.Rngs(0))
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        params = nnx.to_pure_dict(params)
        want = jax.jit(loss_fn(graphdef, rest))(params, data)
        for shape in meshes:
            c = config(arch, shape, impl, **model_fields)
            mesh = sharding.make_mesh(c.mesh)
            fns = trainer._compiled(trainer._key(c, mesh))
            f = jax.jit(trainer._under_mesh(loss_fn(graphdef, rest), mesh),
                        in_shardings=(fns.p_shard, fns.b_shard))
            p = jax.device_put(params, fns.p_shard)
            b = jax.device_put(data, fns.b_shard)
            lowered = f.lower(p, b).as_text()
            assert "manual_computation" in lowered, f"{arch} {shape}: no shard_map around the kernel"
            got = f(p, b)
            for path, x, y in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(got),
                                  jax.tree.leaves(want)):
                # fp32 sums in another order: 1e-3 of the leaf's largest entry covers TPE's
                # q/k gradients (sums over b*t*e terms of both signs); a sharding bug (a missing
                # psum, a wrong carry) is off by O(1)
                err = rel_err(x, y)
                assert err < (2e-5 if x.ndim == 0 else 1e-3), f"{arch} {impl} mesh {shape} {jax.tree_util.keystr(path[0])}: {err}"
            print(f"{arch} {impl} mesh(data,fsdp,tensor,seq)={shape}: loss {float(got[0]):.6f} "
                  "== unsharded, grads equal", flush=True)


def _funcs(mlir):
    """{function name: body text} of a StableHLO module."""
    out, name, lines = {}, None, []
    for line in mlir.splitlines():
        m = re.match(r"\s*func\.func \w+ @([\w.$-]+)\(", line)
        if m:
            if name:
                out[name] = lines
            name, lines = m.group(1), []
        elif name:
            lines.append(line)
    if name:
        out[name] = lines
    return out


def _outside_manual(lines):
    """Lines of a function body that are not inside an sdy.manual_computation region."""
    out, depth_open = [], None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if depth_open is not None:
            if indent > depth_open:
                continue
            depth_open = None
            continue  # the region's closing line
        if "sdy.manual_computation(" in line:
            depth_open = indent
            continue
        out.append(line)
    return out


def mosaic_outside_manual(mlir):
    """Names of functions reachable from @main outside any manual region that hold a Mosaic call
    (empty when every tpu_custom_call runs under shard_map)."""
    funcs = _funcs(mlir)
    bad, seen = [], set()

    def visit(name):
        if name in seen or name not in funcs:
            return
        seen.add(name)
        body = _outside_manual(funcs[name])
        if any("tpu_custom_call" in x for x in body):
            bad.append(name)
        for x in body:
            for callee in re.findall(r"call @([\w.$-]+)", x):
                visit(callee)

    visit("main")
    return bad


def check_mosaic_payloads(arch, mlir, chunk, sub):
    """Every kernel: a cost estimate with FLOPs and bytes; matmuls bf16 x bf16 -> f32 except the
    range sums (f32 at fp32 precision, a [chunk, chunk] or [sub*sub, sub] 0/1 mask on the left).
    Returns (bf16 matmuls, f32 matmuls)."""
    from mosaic_payload import is_bf16, tpu_kernels

    masks = {f"vector<{chunk}x{chunk}xf32>", f"vector<{sub * sub}x{sub}xf32>"}
    n_bf16 = n_f32 = 0
    for kern in tpu_kernels(mlir):
        cost = kern["cost_estimate"]
        assert cost and cost["flops"] > 0 and cost["bytes_accessed"] > 0, f"{arch}: {cost}"
        f32 = [m for m in kern["matmuls"] if not is_bf16(m)]
        assert all(m[3] and m[0] in masks for m in f32), f"{arch}: f32 matmuls {f32}"
        n_bf16, n_f32 = n_bf16 + len(kern["matmuls"]) - len(f32), n_f32 + len(f32)
    assert n_bf16 > 0 and (n_f32 > 0) == (arch == "hgrn2"), (arch, n_bf16, n_f32)
    return n_bf16, n_f32


def check_tpu():
    real_backend = jax.default_backend
    jax.default_backend = lambda: "tpu"  # the Pallas path compiles for Mosaic (interpret=False)
    try:
        for arch in ARCHS:
            c = config(arch, (2, 1, 2, 2), "pallas", d_model=256, n_heads=2, ffn_dim=512,
                       vocab_size=256, dtype="bfloat16", chunk_size=16, max_seq_len=96)
            c.train.update(batch_size=4, seq_len=96)
            mesh = sharding.make_mesh(c.mesh)
            fns = trainer._compiled(trainer._key(c, mesh))
            args = _abstract_step_args(fns, 4, 96)
            mlir = jax.export.export(fns.step_fn, platforms=["tpu"])(*args).mlir_module()
            n = mlir.count("stablehlo.custom_call @tpu_custom_call")
            assert n > 0, f"{arch}: no Mosaic kernel in the lowered step"
            bad = mosaic_outside_manual(mlir)
            assert not bad, f"{arch}: Mosaic calls outside shard_map in {bad}"
            n_bf16, n_f32 = check_mosaic_payloads(arch, mlir, chunk=16, sub=16)
            print(f"{arch}: TPU export: {n} Mosaic custom calls, all inside "
                  f"{mlir.count('sdy.manual_computation(')} shard_map regions, each with a cost "
                  f"estimate; matmuls: {n_bf16} bf16, {n_f32} f32 log-decay range sums", flush=True)
            trainer._compiled.cache_clear()
    finally:
        jax.default_backend = real_backend
    for arch in ARCHS:
        c = config(arch, (2, 1, 2, 2), "xla", d_model=256, n_heads=2, ffn_dim=512,
                   vocab_size=256, chunk_size=16, max_seq_len=96)
        c.train.update(batch_size=4, seq_len=96)
        mesh = sharding.make_mesh(c.mesh)
        fns = trainer._compiled(trainer._key(c, mesh))
        hlo = fns.step_fn.lower(*_abstract_step_args(fns, 4, 96)).compile().as_text()
        gathers = re.findall(r"= \w+\[([\d,]*)\][^ ]* all-gather\(", hlo)
        seq_dims = {"96", "48"}  # t and the per-shard t
        # q, k, v and the decay enter the kernel as [b, t, h, e] (4-D); the residual stream
        # [b, t, d] and the positions [b, t] are not kernel operands
        bad = [g for g in gathers if len(g.split(",")) >= 4 and seq_dims & set(g.split(","))]
        assert not bad, f"{arch}: all-gathers of [b, t, h, e] kernel operands {bad}"
        print(f"{arch}: compiled sharded step: {len(gathers)} all-gathers, none of q/k/v/decay "
              f"(shapes {sorted(set(gathers))})", flush=True)


def _abstract_step_args(fns, b, t):
    sds = jax.ShapeDtypeStruct
    batch = {k: sds((b, t), jnp.float32 if k == "weights" else jnp.int32, sharding=fns.b_shard)
             for k in trainer.BATCH_KEYS}
    rest = jax.tree.map(lambda a: sds(a.shape, a.dtype, sharding=fns.rep), jax.eval_shape(fns.rest))
    return fns.abs_params, fns.abs_opt, rest, batch


def main():
    assert jax.device_count() == 8, jax.devices()
    if sys.argv[1] == "equal":
        check_equal(sys.argv[2] if len(sys.argv) > 2 else "xla")
    elif sys.argv[1] == "conv":  # the short convolution's shifts over a 'seq'-sharded axis
        check_equal("xla", meshes=((2, 1, 2, 2),), short_conv=4)
    else:
        check_tpu()
    print("OK")


if __name__ == "__main__":
    main()
