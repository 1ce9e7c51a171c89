"""Several train steps per dispatch (linscale_jax.train.blocks): the block plan, blocks of batches
read in one call, and the trainer's losses and parameters bit-identical to one dispatch per step."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers.train import ROOT, tiny_config

from linscale_jax import data
from linscale_jax.train import blocks
from linscale_jax.train import loop as trainer
from linscale_jax.train import programs
from linscale_jax.train.batches import BATCH_KEYS, GlobalBatches

CHEAP_COMPILE = ("xla_backend_optimization_level", "xla_cpu_use_fusion_emitters")  # tests/conftest.py


@pytest.mark.parametrize("start,total,k,ends", [
    (0, 23, 4, {10, 20}), (7, 23, 5, {8, 10, 20}), (0, 6, 32, {3}), (0, 5, 1, set()), (12, 12, 4, {5})])
def test_block_plan_covers_every_step_and_ends_at_every_event(start, total, k, ends):
    plan = blocks.block_plan(start, total, k, ends)
    steps = [first + i for first, n in plan for i in range(n)]
    assert steps == list(range(start, total))  # each batch once, in order
    assert all(1 <= n <= k for _, n in plan)
    block_ends = {first + n for first, n in plan}
    assert {s for s in ends if start < s <= total} | ({total} if total > start else set()) <= block_ends


def test_every_lists_the_multiples_after_start():
    assert blocks.every(10, 0, 35) == {10, 20, 30}
    assert blocks.every(10, 20, 35) == {30}
    assert blocks.every(0, 0, 35) == set()


def test_block_steps_follow_the_log_interval_and_the_bytes():
    c = tiny_config(log_every=10)
    assert blocks.block_steps(c) == 10
    c.train.log_every = 1000
    assert blocks.block_steps(c) == blocks.MAX_STEPS
    c.train.update(batch_size=4096, seq_len=4096)  # 268 MB of batches per step
    assert blocks.block_steps(c) == 1


def test_a_block_is_the_steps_batches_read_at_once(monkeypatch):
    """local_block (one read of the records) == the per-step rows stacked, zeros after n; the
    blocks of a plan read several at a time == each block read alone; the global block array ==
    the per-step global batches stacked."""
    from linscale_jax.train import batches as batches_lib

    monkeypatch.setattr(batches_lib, "READ_BYTES", 6 * 4 * 32 * 16)  # reads of 6 steps of tiny rows or more
    c = tiny_config()
    fns, _ = trainer.step_functions(c)
    batches = GlobalBatches(data.train_rows(c), fns.b_shard)
    block = batches.local_block(5, 3, 4)
    for key in BATCH_KEYS:
        want = np.stack([batches.local(s)[key] for s in (5, 6, 7)])
        np.testing.assert_array_equal(block[key][:3], want)
        assert not block[key][3].any() and block[key].dtype == want.dtype
    plan = blocks.block_plan(2, 14, 4, {5, 9})
    for (first, n), got in zip(plan, batches.blocks(plan, 4), strict=True):  # read together
        for key, x in batches.local_block(first, n, 4).items():
            np.testing.assert_array_equal(got[key], x)
    on_devices = batches.put_block(block)
    assert on_devices["inputs"].sharding == batches.block_sharding()
    for s in (5, 6, 7):
        for key, x in batches(s).items():
            np.testing.assert_array_equal(np.asarray(on_devices[key][s - 5]), np.asarray(x))


def test_runs_differing_in_seed_or_constant_rate_share_their_programs():
    """The train and eval programs of runs that differ only in seed or (constant schedule) peak
    rate are one jit object (one compilation); their init functions and rates are their own."""
    a, b = tiny_config(), tiny_config()
    b.optim.lr, b.train.seed = 3e-3, 1
    fa, fb = trainer.step_functions(a)[0], trainer.step_functions(b)[0]
    assert fa.block_fn.program is fb.block_fn.program and fa.step_fn.program is fb.step_fn.program
    assert fa.eval_fn is fb.eval_fn and fa.init_params.program is fb.init_params.program
    assert fa.rest.program is fb.rest.program
    assert float(fa.block_fn.tail[0]) == np.float32(a.optim.lr) and float(fb.block_fn.tail[0]) == np.float32(3e-3)
    programs._programs.cache_clear()  # the shared programs evicted (other shapes compiled since)
    e = tiny_config()
    e.train.seed = 2  # a run not compiled before, then a: both bind the live programs
    fe, fa = trainer.step_functions(e)[0], trainer.step_functions(a)[0]
    assert fa.block_fn.program is fe.block_fn.program and fa.eval_fn is fe.eval_fn
    c, d = tiny_config(), tiny_config()  # cosine: the rate is in the program
    c.optim.schedule = d.optim.schedule = "cosine"
    d.optim.lr = 3e-3
    assert trainer.step_functions(c)[0].block_fn.program is not trainer.step_functions(d)[0].block_fn.program


def test_the_shared_init_program_gives_each_seed_its_own_parameters():
    """init_params and rest, one program with the seed's key as an argument, equal the model
    built with nnx.Rngs(seed) in a program of its own (the seed a constant), bit for bit."""
    import jax
    from flax import nnx

    from linscale_jax.models import ModelConfig, build_model

    c = tiny_config()
    c.train.seed = 3
    fns = trainer.step_functions(c)[0]

    def plain():
        model = build_model(ModelConfig.from_config(c.model), rngs=nnx.Rngs(3))
        _, params, rest = nnx.split(model, nnx.Param, ...)
        return nnx.to_pure_dict(params), rest

    want, got = jax.jit(plain)(), (fns.init_params(), fns.rest())
    assert jax.tree.structure(want) == jax.tree.structure(got)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        a, b = (jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                else x for x in (a, b))
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    other = trainer.step_functions(tiny_config())[0]  # seed 0: the same program, its own values
    assert other.init_params.program is fns.init_params.program
    assert not np.array_equal(np.asarray(jax.tree.leaves(got[0])[0]),
                              np.asarray(jax.tree.leaves(other.init_params())[0]))


def _bits(tmp_path, archs: str) -> dict:
    """helpers.blocks_bits_check in a subprocess with XLA's own CPU code generation (the suite's
    cheap-compile flags dropped: the elemental emitters compile a loop body's reductions in another
    order, so only the production programs are compared)."""
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                     if not any(name in f for name in CHEAP_COMPILE))
    env = dict(os.environ, XLA_FLAGS=flags,
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    out = tmp_path / "bits.json"
    res = subprocess.run([sys.executable, "-m", "helpers.blocks_bits_check", archs, str(tmp_path / "runs"),
                          str(out)], env=env, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("archs", ["llama", pytest.param("tnl,hgrn2,cosformer2", marks=pytest.mark.slow)])
def test_blocks_train_bit_identically_to_one_dispatch_per_step(archs, tmp_path):
    """The same config through the trainer (blocks of 3, 2, 1 and 1 steps) and through the
    compiled step alone, one dispatch per step on the same batches: equal parameters, bit for bit,
    and equal losses to the last bit of their mean (on the Intel Xeon VM the block program sums a
    step's llama loss in another order: 1 ulp at one step, the training itself bit-identical); a
    cooldown branch in blocks equals its formula applied step by step."""
    got = _bits(tmp_path, archs)
    for arch in archs.split(","):
        blocked, per_step = (np.asarray(x, np.float32) for x in got[arch]["losses"])
        assert blocked.shape == per_step.shape and len(blocked) >= 7, arch
        np.testing.assert_array_max_ulp(blocked, per_step, maxulp=2)
        assert got[arch]["params_equal"], (arch, got[arch]["max_param_diff"])
        assert got[arch]["cooldown_equal"] and got[arch]["cooldown_moved"] > 1e-4, (arch, got[arch])
