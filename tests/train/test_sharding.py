"""Mesh construction, logical-axis rules, batch checks; sharded training on 8 simulated CPU devices
matches single-device training (subprocess with --xla_force_host_platform_device_count=8)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import ml_collections
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from linscale_jax.parallel import sharding

ROOT = Path(__file__).resolve().parents[2]


def mesh_cfg(**kw):
    return ml_collections.ConfigDict(dict(dict(data=-1, fsdp=1, tensor=1, seq=1), **kw))


def test_mesh_shape_resolves_minus_one():
    assert sharding.mesh_shape(mesh_cfg(), 8) == dict(data=8, fsdp=1, tensor=1, seq=1)
    assert sharding.mesh_shape(mesh_cfg(data=2, fsdp=-1, tensor=2), 8)["fsdp"] == 2
    mesh = sharding.make_mesh(mesh_cfg(), jax.devices()[:1])
    assert mesh.axis_names == ("data", "fsdp", "tensor")


def test_mesh_shape_errors():
    with pytest.raises(ValueError, match="needs 3 devices but 8 are available"):
        sharding.mesh_shape(mesh_cfg(data=3), 8)
    with pytest.raises(ValueError, match="do(es)? not divide 8"):
        sharding.mesh_shape(mesh_cfg(fsdp=3), 8)
    with pytest.raises(ValueError, match="at most one may be -1"):
        sharding.mesh_shape(mesh_cfg(fsdp=-1), 8)


def abstract_mesh(data=2, fsdp=2, tensor=2):
    return AbstractMesh((data, fsdp, tensor), ("data", "fsdp", "tensor"))


def test_logical_rules_and_shape_rule():
    mesh = abstract_mesh()
    assert sharding.logical_to_spec(("vocab", "embed"), (264, 64), mesh) == P("tensor", "fsdp")
    assert sharding.logical_to_spec(("embed", "mlp"), (64, 6), mesh) == P("fsdp", "tensor")
    assert sharding.logical_to_spec(("embed", "mlp"), (64, 5), mesh) == P("fsdp", None)  # 5 % 2
    assert sharding.logical_to_spec(("embed", "embed"), (8, 8), mesh) == P("fsdp", None)
    assert sharding.logical_to_spec(("layers", "embed"), (3, 8), mesh) == P(None, "fsdp")
    with pytest.raises(ValueError, match="unknown logical axis name 'bogus'"):
        sharding.logical_to_spec(("bogus",), (4,), mesh, where="w")
    params = {"a": {"kernel": jax.ShapeDtypeStruct((8, 4), "float32")},
              "n": jax.ShapeDtypeStruct((8,), "float32")}
    axes = {"a": {"kernel": None}, "n": None}
    specs = sharding.param_specs(params, axes, mesh)
    assert specs == {"a": {"kernel": P("fsdp", "tensor")}, "n": P(None)}


def test_batch_checks():
    mesh = abstract_mesh(data=2, fsdp=2, tensor=2)
    sharding.check_batch(8, 32, 2, mesh)
    with pytest.raises(ValueError, match="not divisible by the data axes data\\*fsdp=4"):
        sharding.check_batch(6, 32, 1, mesh)
    with pytest.raises(ValueError, match="multiple of 8"):
        sharding.check_batch(12, 32, 2, mesh)
    with pytest.raises(ValueError, match="grad_accum"):
        sharding.check_batch(8, 32, 3, mesh)
    assert sharding.batch_spec(mesh) == P(("data", "fsdp"), None)
    seq_mesh = AbstractMesh((2, 1, 1, 2), ("data", "fsdp", "tensor", "seq"))
    assert sharding.batch_spec(seq_mesh) == P(("data", "fsdp"), "seq")
    with pytest.raises(ValueError, match="seq_len=33 is not divisible by mesh.seq=2"):
        sharding.check_batch(4, 33, 1, seq_mesh)


SCRIPT = textwrap.dedent("""
    import json, os, sys, tempfile
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    import jax, numpy as np
    sys.path.insert(0, "configs")
    import tiny
    from linscale_jax.train import loop as trainer
    assert len(jax.devices()) == 8
    out = {}
    for arch, meshes in (("llama", ["single", "data", "fsdp", "data_tensor"]),):
        for name in meshes:
            c = tiny.get_config(arch + "-d64")
            c.model.update(n_layers=1, chunk_size=16)
            c.train.update(steps=4, batch_size=8, seq_len=32, eval_every=0, log_every=1)
            c.checkpoint.update(every_steps=0, log_spaced=0, async_save=False)
            c.mesh.update(dict(single=dict(data=-1), data=dict(data=-1), fsdp=dict(data=1, fsdp=-1),
                               data_tensor=dict(data=2, tensor=-1))[name])
            devices = jax.devices()[:1] if name == "single" else None
            s = trainer.train(c, tempfile.mkdtemp(), devices=devices)
            leaves = {jax.tree_util.keystr(p): np.asarray(x)
                      for p, x in jax.tree_util.tree_flatten_with_path(s["params"])[0]}
            if name == "single":
                ref = leaves
            specs = sorted({str(x.sharding.spec) for x in jax.tree.leaves(s["params"])})
            out[arch + ":" + name] = dict(
                losses=[s["losses"][k] for k in sorted(s["losses"])],
                max_param_diff=max(float(np.max(np.abs(leaves[k] - ref[k]))) for k in ref),
                specs=specs)
    print("RESULT" + json.dumps(out), flush=True)
    os._exit(0)  # skip interpreter teardown
""")


@pytest.fixture(scope="module")
def sharded_runs():
    env = dict(os.environ, JAX_PLATFORMS="cpu")  # the script adds the 8 devices to XLA_FLAGS
    p = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


# Tolerance: sharded runs reduce in a different order than one device; over 4 AdamW steps the
# losses agree to 2e-5 absolute and the float32 parameters to 2e-5.
LOSS_TOL, PARAM_TOL = 2e-5, 2e-5


@pytest.mark.parametrize("run", ["llama:data", "llama:fsdp", "llama:data_tensor"])
def test_sharded_training_matches_single_device(sharded_runs, run):
    arch = run.split(":")[0]
    ref, got = sharded_runs[arch + ":single"], sharded_runs[run]
    assert len(got["losses"]) == 4 and got["losses"][-1] < got["losses"][0]
    assert max(abs(a - b) for a, b in zip(got["losses"], ref["losses"])) < LOSS_TOL
    assert got["max_param_diff"] < PARAM_TOL
    if run.endswith("fsdp"):
        assert any("fsdp" in s for s in got["specs"]), got["specs"]
    if run.endswith("tensor"):
        assert any("tensor" in s for s in got["specs"]), got["specs"]


def test_weight_decay_mask_skips_norms_and_lower_bounds():
    """Decay matrices and the embedding (>= 2 dims, the nanoGPT convention); never norm scales,
    HGRN2's per-layer lower bounds Γ (its stacked 'layers' axis does not count as a matrix dim),
    LRPE θ [h, e] or the TPE decay rates ('gain' dims are not matrix dims)."""
    from linscale_jax.train import optim
    from linscale_jax.config import model_defaults
    from linscale_jax.parallel.sharding import _flatten, model_parts

    for arch in ("hgrn2", "cosformer2", "llama"):
        m = model_defaults()
        m.update(arch=arch, n_layers=2, d_model=32, n_heads=2, ffn_dim=64, vocab_size=64,
                 max_seq_len=64)
        parts = model_parts(m)
        mask = dict(_flatten(optim.decay_mask(parts.param_axes, parts.abstract_params)))
        names = {"/".join(map(str, k)): v for k, v in mask.items()}
        assert any(v for k, v in names.items() if "embed" in k), names
        for k, v in names.items():
            if any(s in k for s in ("lower_bounds", "scale", "theta", "log_rate")):
                assert not v, f"{arch}: {k} should not be weight-decayed"
            if any(s in k for s in ("tpe/up", "tpe/down")):
                assert v, f"{arch}: {k} is a matrix and should be weight-decayed"
        if arch == "cosformer2":  # LRPE θ [h, e] and the TPE rates are gains; the TPE's one (tied)
            #                       d×e matrix is decayed
            assert {k for k in names if "theta" in k or "tpe" in k} == {
                "layers/0/mixer/theta", "layers/1/mixer/theta", "tpe/log_rate", "tpe/up/kernel"}, names
        assert sum(names.values()) >= 2 * 4, names  # at least the mixer/GLU matrices of 2 layers
