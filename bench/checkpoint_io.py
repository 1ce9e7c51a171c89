"""Checkpoint save and restore wall time with and without checksum verification, for the 1B
config's parameter shapes + AdamW state sharded over 8 simulated CPU devices (fsdp=8).

    python bench/checkpoint_io.py [--arch=llama] [--size=1b] [--max_gb=2.5] [--dir=/tmp/ckpt_io]
                                  [--json]

The state is the model's parameters (float32) and optax AdamW's mu and nu, each array with its
real 1B shape and sharding (hashed integers as values: zeros would compress). When the whole state exceeds
--max_gb, the bench keeps the embedding, the output head and as many whole layers as fit (the
same shapes, fewer layers) and prints the fraction kept: every time below scales with the bytes.

Columns (seconds, one process, each row measured in the same run):
  save            Orbax save + wait until finalised (what the run pays either way)
  hash (bg)       this process's sha256 of the files it wrote (checksums.Recorder: a background
                  thread beside the step loop; the loop's cost is `submit`, printed as well)
  save+hash sync  the save followed by hashing every file on the training path (process 0 alone)
  restore         Orbax restore of every array into its sharding, no verification
  verify          this process's share of the checksums (one process: every file)
  restore+verify  verify then restore
The files were just written, so reads come from the page cache: verify measures hashing, not disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8").strip()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from linscale_jax.config import base_config  # noqa: E402
from linscale_jax.parallel import sharding  # noqa: E402
from linscale_jax.models import ModelConfig, sizes  # noqa: E402
from linscale_jax.run import checkpoint as ckpt  # noqa: E402
from linscale_jax.run import checksums  # noqa: E402
from linscale_jax.train import optim  # noqa: E402


def nbytes(tree) -> int:
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def state_shapes(arch: str, size: str, max_gb: float):
    """(config, abstract params, abstract opt state, tx, kept layers, all layers, full bytes)."""
    c = base_config()
    sizes.apply_model(c.model, sizes.paper_model(arch, size))
    layers = int(c.model.n_layers)

    def build(n):
        c.model.n_layers = n
        parts = sharding.model_parts(ModelConfig.from_config(c.model))
        tx = optim.make_optimizer(c.optim, 1000, parts.param_axes, parts.abstract_params)
        return parts, tx, jax.eval_shape(tx.init, parts.abstract_params)

    parts, tx, opt = build(layers)
    full = nbytes(parts.abstract_params) + nbytes(opt)
    kept = layers
    while kept > 1 and nbytes(parts.abstract_params) + nbytes(opt) > max_gb * 1e9:
        kept -= 1
        parts, tx, opt = build(kept)
    return c, parts, tx, opt, kept, layers, full


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="llama")
    ap.add_argument("--size", default="1b")
    ap.add_argument("--max_gb", type=float, default=2.5)
    ap.add_argument("--dir", default="/tmp/ckpt_io")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    c, parts, tx, abs_opt, kept, layers, full = state_shapes(a.arch, a.size, a.max_gb)
    c.mesh.update(data=1, fsdp=8)
    mesh = sharding.make_mesh(c.mesh)
    p_specs = sharding.param_specs(parts.abstract_params, parts.param_axes, mesh)
    p_shard = sharding.named(mesh, p_specs)
    o_shard = sharding.named(mesh, sharding.opt_state_specs(tx, abs_opt, p_specs))

    def random_like(tree, shardings, seed):
        leaves, treedef = jax.tree.flatten(tree)
        shs = jax.tree.leaves(shardings)
        out = []
        for i, (x, sh) in enumerate(zip(leaves, shs)):
            def fill(salt, x=x):  # a cheap integer hash: values that do not compress
                n = jnp.arange(int(np.prod(x.shape)), dtype=jnp.uint32) * jnp.uint32(2654435761)
                n = n + salt
                n = n ^ (n >> 13)
                return jax.lax.bitcast_convert_type(n, jnp.float32).reshape(x.shape).astype(x.dtype)

            out.append(jax.jit(fill, out_shardings=sh)(jnp.uint32(seed * 10_000 + i)))
        return jax.tree.unflatten(treedef, out)

    params = random_like(parts.abstract_params, p_shard, 1)
    opt_state = random_like(abs_opt, o_shard, 2)
    state_gb = (nbytes(params) + nbytes(opt_state)) / 1e9

    workdir = Path(a.dir)
    shutil.rmtree(workdir, ignore_errors=True)
    c.checkpoint.update(async_save=True, keep=0)
    mngr = ckpt.manager(workdir, c.checkpoint)
    t = time.perf_counter()
    ckpt.save(mngr, 1, params, {"step": 1}, opt_state=opt_state, data_state={"pos": 0})
    mngr.wait_until_finished()
    save_s = time.perf_counter() - t
    mngr.close()
    step_dir = ckpt.ckpt_dir(workdir) / "1"
    files = checksums._files(step_dir)
    disk_gb = sum(p.stat().length for p in files) / 1e9

    rec = checksums.Recorder(0, 1)
    t = time.perf_counter()
    rec.submit(step_dir)
    submit_s = time.perf_counter() - t
    rec.close()
    hash_s = time.perf_counter() - t

    abs_p = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                         parts.abstract_params, p_shard)
    abs_o = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                         abs_opt, o_shard)
    del params, opt_state

    def restore():
        m = ckpt.manager(workdir, read_only=True)
        try:
            import orbax.checkpoint as ocp

            r = m.restore(1, args=ocp.args.Composite(
                params=ocp.args.StandardRestore(abs_p), opt_state=ocp.args.StandardRestore(abs_o)))
            jax.block_until_ready([r["params"], r["opt_state"]])
            return r
        finally:
            m.close()

    t = time.perf_counter()
    r = restore()
    restore_s = time.perf_counter() - t
    del r
    checksums._VERIFIED.clear()
    t = time.perf_counter()
    problem = checksums.verify(step_dir, (0, 1))
    verify_s = time.perf_counter() - t
    assert problem is None, problem
    t = time.perf_counter()
    r = restore()
    restore2_s = time.perf_counter() - t
    del r
    shutil.rmtree(workdir, ignore_errors=True)

    out = dict(arch=a.arch, size=a.size, devices=jax.device_count(), layers_kept=kept,
               layers=layers, state_gb=round(state_gb, 3), full_state_gb=round(full / 1e9, 3),
               files=len(files), disk_gb=round(disk_gb, 3), save_s=round(save_s, 2),
               submit_s=round(submit_s, 4), hash_bg_s=round(hash_s, 2),
               save_plus_hash_sync_s=round(save_s + hash_s, 2), restore_s=round(restore_s, 2),
               verify_s=round(verify_s, 2), restore_plus_verify_s=round(verify_s + restore2_s, 2),
               hash_mb_per_s=round(disk_gb * 1e3 / max(hash_s, 1e-9), 1))
    if a.json:
        print(json.dumps(out))
        return
    print(f"{a.arch}-{a.size}: params + AdamW mu, nu = {full / 1e9:.2f} GB in full; kept "
          f"{kept}/{layers} layers + embeddings = {state_gb:.2f} GB ({state_gb * 1e9 / full:.0%}), "
          f"{len(files)} files, {disk_gb:.2f} GB on disk, sharded over {jax.device_count()} devices "
          f"(fsdp=8)")
    print("| | without verification | with verification |")
    print("|---|---|---|")
    print(f"| save (training path) | {save_s:.2f} s | {save_s + submit_s:.2f} s "
          f"(+ {submit_s * 1e3:.1f} ms submit; hash {hash_s:.2f} s in the background) |")
    print(f"| save, hashing on the path (process 0 hashes all) | {save_s:.2f} s | "
          f"{save_s + hash_s:.2f} s |")
    print(f"| restore | {restore_s:.2f} s | {verify_s + restore2_s:.2f} s (verify {verify_s:.2f} "
          f"s + restore {restore2_s:.2f} s) |")
    print(f"sha256 over the checkpoint: {disk_gb * 1e3 / max(hash_s, 1e-9):.0f} MB/s")


if __name__ == "__main__":
    main()
