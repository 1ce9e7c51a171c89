"""The linear mixers run their kernels inside jax.shard_map (tests/models_shard_map_check.py, in a
subprocess with 8 simulated CPU devices)."""

import os
import subprocess
import sys
import pytest

pytestmark = pytest.mark.slow  # over 30 s on 2 CPU cores: deselect with -m "not slow"

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=_ROOT,
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8")
    res = subprocess.run([sys.executable, os.path.join(_ROOT, "tests", "models_shard_map_check.py"),
                          *args], env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.rstrip().endswith("OK"), res.stdout
    return res.stdout


def test_sharded_model_equals_unsharded_every_mesh():
    """TNL, HGRN2, cosFormer2: loss and all gradients under (data, fsdp, tensor, seq) meshes,
    seq > 1 included (LASP), equal the unsharded model; packed documents."""
    out = _run("equal", "xla")
    assert out.count("grads equal") == 12


def test_sharded_short_conv_equals_unsharded():
    """model.short_conv=4 under a (data, tensor, seq) mesh: the convolution's taps cross sequence
    shards, never documents; loss and gradients equal the unsharded model's."""
    out = _run("conv")
    assert out.count("grads equal") == 3


def test_sharded_train_step_lowered_for_tpu():
    """The trainer's sharded step exported for TPU: every Mosaic call inside a shard_map region;
    compiled for 8 CPU devices: no all-gather of q, k, v or the decay."""
    out = _run("tpu")
    assert out.count("all inside") == 3 and out.count("none of q/k/v") == 3
