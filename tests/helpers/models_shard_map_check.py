"""Run by tests/models/test_models_shard_map.py with
XLA_FLAGS=--xla_force_host_platform_device_count=8; writes what it measured to OUT (JSON) for the
test to judge.

    python -m helpers.models_shard_map_check equal IMPL OUT   # sharded vs unsharded, values + grads
    python -m helpers.models_shard_map_check tpu OUT          # the sharded train step lowered for TPU
    python -m helpers.models_shard_map_check conv OUT         # `equal` with model.short_conv=4, one mesh
    python -m helpers.models_shard_map_check stacks OUT       # `equal` for gdn and hybrid stacks

`equal`: for TNL, HGRN2 and cosFormer2 and every mesh below (including 'seq' > 1, the LASP form),
the loss and every parameter gradient of the trainer's sharded forward (parameters sharded by
linscale_jax.parallel.sharding, the kernels inside jax.shard_map) against the unsharded model's, with
packed documents whose boundaries fall inside and at the edge of sequence shards:
{arch: {"data,fsdp,tensor,seq": {"manual": shard_map in the lowering, "loss_err": relative error
of the loss, "grad_err": the largest relative error of a gradient leaf, "worst": that leaf}}}.
`tpu`: jax.export of the trainer's sharded train step for platform "tpu" (impl="pallas", bf16,
head dim 128) from this CPU host, and the same step compiled for the 8 CPU devices (same SPMD
partitioner, impl="xla"): {arch: {"mosaic_calls", "manual_regions", "outside_manual": functions
holding a Mosaic call outside a shard_map region, "kernels": [{"cost_estimate", "matmuls"}]
(helpers.mosaic_payload), "gathers": shapes of the compiled step's all-gathers}}.
"""

import json
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from helpers.mosaic_payload import tpu_kernels
from linscale_jax.parallel import sharding
from linscale_jax.train import loop as trainer
from linscale_jax.train import programs
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


# `stacks`: Gated DeltaNet (no 'seq' split: its shard_map covers batch and heads) and hybrid stacks
# (their linear layers' kernels under shard_map, llama layers' attention partitioned by XLA).
STACKS = {"gdn": dict(arch="gdn"), "tnl+hybrid=1:1": dict(arch="tnl", layers="tnl,llama"),
          "gdn+hybrid=1:1": dict(arch="gdn", layers="llama,gdn")}
STACK_MESHES = ((8, 1, 1, 1), (2, 2, 2, 1))


def measure_equal(impl, meshes=MESHES, archs=ARCHS, **model_fields):
    data = batch()
    out = {}
    for arch in archs:
        fields = dict(model_fields, **STACKS[arch]) if arch in STACKS else dict(model_fields, arch=arch)
        arch_field = fields.pop("arch")
        c0 = config(arch_field, (1, 1, 1, 1), impl, **fields)
        model = build_model(ModelConfig.from_config(c0.model), rngs=nnx.Rngs(0))
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        params = nnx.to_pure_dict(params)
        want = jax.jit(loss_fn(graphdef, rest))(params, data)
        out[arch] = {}
        for shape in meshes:
            c = config(arch_field, shape, impl, **fields)
            mesh = sharding.make_mesh(c.mesh)
            fns = programs._compiled(programs._key(c, mesh))
            f = jax.jit(programs._under_mesh(loss_fn(graphdef, rest), mesh),
                        in_shardings=(fns.p_shard, fns.b_shard))
            p = jax.device_put(params, fns.p_shard)
            b = jax.device_put(data, fns.b_shard)
            manual = "manual_computation" in f.lower(p, b).as_text()
            got = f(p, b)
            grads = {jax.tree_util.keystr(path): rel_err(x, y) for (path, x), y in
                     zip(jax.tree_util.tree_leaves_with_path(got[1]), jax.tree.leaves(want[1]))}
            worst = max(grads, key=grads.get)
            out[arch][",".join(map(str, shape))] = dict(
                manual=manual, loss_err=rel_err(got[0], want[0]), grad_err=grads[worst],
                worst=worst, leaves=len(grads))
            print(f"{arch} {impl} mesh(data,fsdp,tensor,seq)={shape}: loss error "
                  f"{out[arch][','.join(map(str, shape))]['loss_err']:.2g}, largest gradient "
                  f"error {grads[worst]:.2g} ({worst})", flush=True)
    return out


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


def measure_tpu():
    out = {}
    real_backend = jax.default_backend
    jax.default_backend = lambda: "tpu"  # the Pallas path compiles for Mosaic (interpret=False)
    try:
        for arch in ARCHS:
            c = config(arch, (2, 1, 2, 2), "pallas", d_model=256, n_heads=2, ffn_dim=512,
                       vocab_size=256, dtype="bfloat16", chunk_size=16, max_seq_len=96)
            c.train.update(batch_size=4, seq_len=96)
            mesh = sharding.make_mesh(c.mesh)
            fns = programs._compiled(programs._key(c, mesh))
            args = _abstract_step_args(fns, 4, 96)
            mlir = jax.export.export(fns.step_fn, platforms=["tpu"])(*args).mlir_module()
            out[arch] = dict(mosaic_calls=mlir.count("stablehlo.custom_call @tpu_custom_call"),
                             manual_regions=mlir.count("sdy.manual_computation("),
                             outside_manual=mosaic_outside_manual(mlir),
                             kernels=tpu_kernels(mlir))
            trainer.clear_caches()
    finally:
        jax.default_backend = real_backend
    for arch in ARCHS:
        c = config(arch, (2, 1, 2, 2), "xla", d_model=256, n_heads=2, ffn_dim=512,
                   vocab_size=256, chunk_size=16, max_seq_len=96)
        c.train.update(batch_size=4, seq_len=96)
        mesh = sharding.make_mesh(c.mesh)
        fns = programs._compiled(programs._key(c, mesh))
        hlo = fns.step_fn.lower(*_abstract_step_args(fns, 4, 96)).compile().as_text()
        out[arch]["gathers"] = re.findall(r"= \w+\[([\d,]*)\][^ ]* all-gather\(", hlo)
        print(f"{arch}: {out[arch]['mosaic_calls']} Mosaic calls, "
              f"{len(out[arch]['gathers'])} all-gathers", flush=True)
    return out


def _gdn_seq_refusal():
    """The error of gdn's forward under a 'seq' axis > 1 (the delta rule is not sequence-parallel)."""
    c = config("gdn", (2, 1, 2, 2), "xla")
    mesh = sharding.make_mesh(c.mesh)
    model = build_model(ModelConfig.from_config(c.model), rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    try:
        jax.eval_shape(programs._under_mesh(loss_fn(graphdef, rest), mesh), nnx.to_pure_dict(params),
                       batch())
    except ValueError as e:
        return str(e)
    return ""


def _abstract_step_args(fns, b, t):
    sds = jax.ShapeDtypeStruct
    batch = {k: sds((b, t), jnp.float32 if k == "weights" else jnp.int32, sharding=fns.b_shard)
             for k in trainer.BATCH_KEYS}
    rest = jax.tree.map(lambda a: sds(a.shape, a.dtype, sharding=fns.rep), jax.eval_shape(fns.rest))
    return fns.abs_params, fns.abs_opt, rest, batch


def main():
    assert jax.device_count() == 8, jax.devices()
    if sys.argv[1] == "equal":
        out = measure_equal(sys.argv[2])
    elif sys.argv[1] == "conv":  # the short convolution's taps over a 'seq'-sharded axis
        out = measure_equal("xla", meshes=((2, 1, 2, 2),), short_conv=4)
    elif sys.argv[1] == "stacks":
        out = measure_equal("xla", meshes=STACK_MESHES, archs=tuple(STACKS))
        out["gdn_seq_refused"] = _gdn_seq_refusal()
    else:
        out = measure_tpu()
    with open(sys.argv[-1], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
