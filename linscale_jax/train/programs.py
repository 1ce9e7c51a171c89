"""The trainer's compiled programs: the train step, blocks of steps, eval and initialisation of a
run, jitted once per shape and shared across runs (in the process and through the persistent
compilation cache).

    fns = programs.compiled(config, mesh)  # cached: fns.block_fn, fns.step_fn, fns.eval_fn, ...
    params, rest = fns.init_params(), fns.rest()
    opt_state = fns.init_opt(params)
    params, opt_state, m = fns.block_fn(params, opt_state, rest, batches, n, scale, scaled)

One set of programs serves every run of a (model, optimizer, steps, grad_accum, mesh): the run's
seed and, under a constant schedule, its peak rate (optim.runtime_lr) are arguments of the programs,
not constants in them, so replicate seeds and tuning cells of one shape compile nothing new in a
process and hit the persistent cache (enable_compilation_cache) across processes. The init programs
take the seed as an int32 argument: their parameters are those of nnx.Rngs(seed), bit for bit.
"""

from __future__ import annotations

import functools
import json
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from linscale_jax.models import ModelConfig
from linscale_jax.parallel import sharding
from linscale_jax.train import blocks
from linscale_jax.train import optim


def loss_sums(model, batch):
    """(sum of weights * cross-entropy, sum of weights) over a batch of [b, t] arrays."""
    logits = model(batch["inputs"], segment_ids=batch["segment_ids"])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                         batch["targets"])
    w = batch["weights"].astype(jnp.float32)
    return jnp.sum(ce * w), jnp.sum(w)


def make_train_step(graphdef, tx_of, grad_accum: int):
    """train_step(params, opt_state, rest, batch, lr) -> (params, opt_state, {loss, grad_norm,
    params_finite}): one update on a [b, t] batch with the optimizer tx_of(lr) (lr: the peak rate,
    a float32 scalar argument; optim.runtime_lr)."""

    def grads_of(params, rest, mb):
        def f(p):
            return loss_sums(nnx.merge(graphdef, p, rest), mb)

        (l, w), g = jax.value_and_grad(f, has_aux=True)(params)
        return g, l, w

    def train_step(params, opt_state, rest, batch, lr):
        tx = tx_of(lr)
        if grad_accum == 1:
            g, l, w = grads_of(params, rest, batch)
        else:  # micro-batch j = rows j, j+A, j+2A, ...: each device keeps its rows (no resharding)
            mbs = jax.tree.map(
                lambda x: jnp.swapaxes(x.reshape(x.shape[0] // grad_accum, grad_accum,
                                                 *x.shape[1:]), 0, 1), batch)

            def body(carry, mb):
                g, l, w = grads_of(params, rest, mb)
                return jax.tree.map(jnp.add, carry, (g, l, w)), None

            zeros = (jax.tree.map(jnp.zeros_like, params), jnp.zeros(()), jnp.zeros(()))
            (g, l, w), _ = jax.lax.scan(body, zeros, mbs)
        denom = jnp.maximum(w, 1.0)
        grads = jax.tree.map(lambda x: x / denom, g)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(params)]))
        return params, opt_state, dict(loss=l / denom, grad_norm=optax.global_norm(grads),
                                       params_finite=finite)

    return train_step


def make_eval_step(graphdef):
    def eval_step(params, rest, batch):
        return loss_sums(nnx.merge(graphdef, params, rest), batch)

    return eval_step


def enable_compilation_cache(path: str | None = None) -> str | None:
    """Persist XLA compilations across processes (re-runs, resumes, the study's sizes on a second
    invocation): jax's compilation cache in `path`, else $LINSCALE_COMPILATION_CACHE, else
    ~/.cache/linscale_jax/xla. LINSCALE_COMPILATION_CACHE=off disables it. Returns the directory.
    A directory the caller already set (jax_compilation_cache_dir) is kept."""
    import os

    if jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir
    path = path or os.environ.get("LINSCALE_COMPILATION_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "linscale_jax", "xla")
    if path.lower() in ("off", "0", "none"):
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # every program: a read
    #                 costs less than the smallest compilation (a run's schedule, casts, stages)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def _under_mesh(fn, mesh):
    """fn traced with `mesh` as the context mesh, so the linear mixers run their kernels inside
    `jax.shard_map` over it (linscale_jax.models.linear_common.kernel_mesh)."""

    def wrapped(*args):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return fn(*args)

    return wrapped


def _init_fn(model_cfg):
    """init(key_data) -> (params, rest) of the model built with nnx.Rngs(key); key_data: the
    uint32 data of the run's key (seed_key), an argument, so one program serves every seed."""
    from linscale_jax.models import build_model

    def init(key_data):
        rngs = nnx.Rngs(jax.random.wrap_key_data(key_data))
        _, params, rest = nnx.split(build_model(model_cfg, rngs=rngs), nnx.Param, ...)
        return nnx.to_pure_dict(params), rest

    return init


def seed_key(seed: int) -> np.ndarray:
    """The uint32 key data of jax.random.key(seed) (the key nnx.Rngs(seed) starts from)."""
    return np.asarray(jax.random.key_data(jax.random.key(int(seed))))


def _key(config, mesh):
    sections = (config.model, config.optim, config.train.steps, config.train.seed,
                config.train.grad_accum)
    return json.dumps([x.to_json() if hasattr(x, "to_json") else x for x in sections]), mesh


def _program_key(key):
    """The part of a run's key its programs depend on: not the seed (an argument of the init
    programs), nor a runtime peak rate (optim.runtime_lr): runs differing only in those share
    programs."""
    config_json, mesh = key
    sections = json.loads(config_json)
    optim_cfg = json.loads(sections[1])
    if optim.runtime_lr(ml_collections.ConfigDict(optim_cfg)):
        optim_cfg["lr"] = None
    sections[1], sections[3] = json.dumps(optim_cfg), None
    return json.dumps(sections), mesh


def compiled(config, mesh):
    """The shardings and jitted init / train / eval functions of `config` on `mesh`: the programs
    of its (model, optimizer, steps, grad_accum, mesh), cached and shared by runs that differ only
    in seed or, under a constant schedule, peak rate, bound to this run's seed and rate."""
    return _compiled(_key(config, mesh))


def replicated(value, sharding):
    """A numpy value as a jax.Array replicated over `sharding` (every process passes the same
    value; valid when the mesh spans several processes, unlike device_put of a host value)."""
    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda idx: np.asarray(value[idx]))


class _Bound:
    """A shared jitted program with its trailing arguments bound (a run's peak rate or seed key):
    called, traced and lowered like the jitted function with the leading arguments."""

    def __init__(self, program, *tail):
        self.program, self.tail = program, tail

    def __call__(self, *args):
        return self.program(*args, *self.tail)

    def trace(self, *args):
        return self.program.trace(*args, *self.tail)

    def lower(self, *args):
        return self.program.lower(*args, *self.tail)


def _compiled(key):
    """The functions of one run (see `compiled`): the shared programs (_programs) bound to its seed
    (init_params(), rest()) and peak rate. step_fn(params, opt_state, rest, batch) is one train step, block_fn(params, opt_state, rest, batches [k, b, t], n, scale [k], scaled [k]) n
    of them in one dispatch (linscale_jax.train.blocks); jit compiles each on first use. Not cached
    itself, so a run always binds the programs _programs holds now."""
    sections = json.loads(key[0])
    progs = _programs(_program_key(key))
    lr = replicated(np.float32(json.loads(sections[1])["lr"]), progs.rep)
    key_data = replicated(seed_key(sections[3]), progs.rep)
    return types.SimpleNamespace(
        **{k: v for k, v in vars(progs).items() if k not in ("step", "block", "init", "init_rest")},
        init_params=_Bound(progs.init, key_data), rest=_Bound(progs.init_rest, key_data),
        step_fn=_Bound(progs.step, lr), block_fn=_Bound(progs.block, lr))


def clear_caches() -> None:
    """Forget every cached program (e.g. after building programs for another backend)."""
    _programs.cache_clear()


@functools.lru_cache(maxsize=8)
def _programs(program_key):
    """Shardings and jitted init / train / eval programs of a (model, optimizer, steps, mesh);
    cached so that repeated runs in one process (tests, notebooks, a study worker's runs) reuse
    their compilations. step and block take the peak rate as their last argument (a float32
    scalar; the optimizer's own optim.lr where the schedule keeps it: optim.runtime_lr), init and
    init_rest the key data of the run's seed (seed_key: uint32 [2])."""
    config_json, mesh = program_key
    sections = json.loads(config_json)
    model_cfg = ModelConfig.from_config(json.loads(sections[0]))
    optim_cfg = ml_collections.ConfigDict(json.loads(sections[1]))
    steps, accum = int(sections[2]), int(sections[4])
    parts = sharding.model_parts(model_cfg, 0)
    p_specs = sharding.param_specs(parts.abstract_params, parts.param_axes, mesh)
    p_shard = sharding.named(mesh, p_specs)
    runtime = optim.runtime_lr(optim_cfg)
    if runtime:
        optim_cfg.lr = 1.0  # a placeholder: the rate is the programs' argument
    tx = optim.make_optimizer(optim_cfg, steps, parts.param_axes, parts.abstract_params)

    def tx_of(lr):
        if not runtime:
            return tx
        return optim.make_optimizer(optim_cfg, steps, parts.param_axes, parts.abstract_params, lr)

    abstract_opt = jax.eval_shape(tx.init, parts.abstract_params)
    o_shard = sharding.named(mesh, sharding.opt_state_specs(tx, abstract_opt, p_specs))
    rep = NamedSharding(mesh, PartitionSpec())
    b_shard = NamedSharding(mesh, sharding.batch_spec(mesh))
    blk_shard = NamedSharding(mesh, PartitionSpec(None, *b_shard.spec))
    train_step = make_train_step(parts.graphdef, tx_of, accum)
    init = _init_fn(model_cfg)
    init_params = lambda key_data: init(key_data)[0]  # noqa: E731
    init_rest = lambda key_data: init(key_data)[1]  # noqa: E731
    init_params.__name__, init_rest.__name__ = "init_params", "init_rest"  # the programs' names
    with_sharding = lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh)  # noqa: E731
    return types.SimpleNamespace(
        p_shard=p_shard, o_shard=o_shard, b_shard=b_shard, rep=rep,
        abs_params=jax.tree.map(with_sharding, parts.abstract_params, p_shard),
        abs_opt=jax.tree.map(with_sharding, abstract_opt, o_shard),
        init=jax.jit(init_params, in_shardings=(rep,), out_shardings=p_shard),
        init_rest=jax.jit(init_rest, in_shardings=(rep,), out_shardings=rep),
        init_opt=jax.jit(tx.init, out_shardings=o_shard),
        step=jax.jit(_under_mesh(train_step, mesh),
                     in_shardings=(p_shard, o_shard, rep, b_shard, rep),
                     out_shardings=(p_shard, o_shard, rep), donate_argnums=(0, 1)),
        block=jax.jit(_under_mesh(blocks.make_block_step(train_step), mesh),
                      in_shardings=(p_shard, o_shard, rep, blk_shard, rep, rep, rep, rep),
                      out_shardings=(p_shard, o_shard, rep), donate_argnums=(0, 1)),
        eval_fn=jax.jit(_under_mesh(make_eval_step(parts.graphdef), mesh), in_shardings=(p_shard, rep, b_shard)),
    )


def step_functions(config, devices=None):
    """(jitted functions of the run's model, optimizer and mesh, the mesh): the same cached objects
    the trainer uses in this process, so a caller reusing them (study.cooldown) compiles nothing."""
    mesh = sharding.make_mesh(config.mesh, devices)
    return _compiled(_key(config, mesh)), mesh


