"""The training loop: sharded state, jitted train step, exact resume, checkpoints, metrics.

    from linscale_jax.train import loop as trainer
    summary = trainer.train(config, workdir)                 # resumes from workdir's checkpoints
    summary = trainer.train(config, workdir, init_from=CKPT)  # start from converted weights

State lives as pure dicts of jax.Arrays: params (float32, sharded by linscale_jax.parallel.sharding) and the
optax state (sharded like the params). The step `train_step(params, opt_state, rest, batch)` is
jitted with in/out shardings and donates params and opt_state. A global batch [b, t] is split into
train.grad_accum micro-batches and scanned; the loss is sum(weights * cross-entropy) / sum(weights)
over the whole global batch, so accumulation is exact up to summation order.
Step s means "after s optimizer updates"; the row logged at step s holds the loss of update s.

The step loop runs blocks of steps, one dispatch each (linscale_jax.train.blocks: up to
train.log_every steps in a `lax.fori_loop`, ending at every log, eval and checkpoint step; the
losses and parameters are those of one dispatch per step, bit for bit). It never waits on the
devices between log steps: a block's batches are read in one call and put on the devices by a
background thread (linscale_jax.train.overlap), the per-step metrics stay on the devices as [k]
arrays until a log, eval or checkpoint step fetches them all at once, and preemption is decided by
JAX's preemption sync service (linscale_jax.train.preemption), a host-side call, at block edges.
Checkpoint checksums are hashed per process in a background thread
(linscale_jax.run.checksums.Recorder).
"""

from __future__ import annotations

import functools
import json
import time
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from linscale_jax.run import async_save
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.run import checksums
from linscale_jax.run import signals
from linscale_jax.train import blocks
from linscale_jax.train import divergence
from linscale_jax.train import early_stop
from linscale_jax.train import overlap
from linscale_jax.train.batches import BATCH_KEYS, GlobalBatches
from linscale_jax.train.preemption import Preemption
from linscale_jax.train import metrics as metrics_lib
from linscale_jax.train import tracking
from linscale_jax.parallel import distributed
from linscale_jax.train import optim
from linscale_jax.run import integrity
from linscale_jax.parallel import sharding
from linscale_jax.models import ModelConfig
from linscale_jax.config import check_model
from linscale_jax.errors import Stopped

PREFETCH = 2  # blocks of batches read and put on the devices ahead of the running block

NonFiniteLossError = divergence.DivergenceError  # NaN/inf or exploding loss; checkpoints are kept


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
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def _under_mesh(fn, mesh):
    """fn traced with `mesh` as the context mesh, so the linear mixers run their kernels inside
    `jax.shard_map` over it (linscale_jax.models.linear_common.kernel_mesh)."""

    def wrapped(*args):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return fn(*args)

    return wrapped


def _init_fn(model_cfg, seed):
    from linscale_jax.models import build_model

    def init():
        _, params, rest = nnx.split(build_model(model_cfg, rngs=nnx.Rngs(seed)), nnx.Param, ...)
        return nnx.to_pure_dict(params), rest

    return init


def _check_init_compatible(config, meta, init_from):
    """Model fields that change parameter shapes must agree with the init checkpoint."""
    shape_fields = ("arch", "n_layers", "d_model", "n_heads", "ffn_dim", "vocab_size")
    stored = meta["config"]["model"]
    diff = {k: (stored.get(k), config.model.get(k)) for k in shape_fields
            if stored.get(k) != config.model.get(k)}
    if diff:
        flags = " ".join(f"--config.model.{k}={v[0]}" for k, v in diff.items())
        raise ValueError(
            f"--init_from={init_from}: its model differs from the config in {diff} "
            f"(checkpoint, config); pass {flags} or a config file matching the checkpoint.")


def _key(config, mesh):
    sections = (config.model, config.optim, config.train.steps, config.train.seed,
                config.train.grad_accum)
    return json.dumps([x.to_json() if hasattr(x, "to_json") else x for x in sections]), mesh


def _program_key(key):
    """The part of a run's key its train and eval programs depend on: not the seed (init only),
    nor a runtime peak rate (optim.runtime_lr): runs differing only in those share programs."""
    config_json, mesh = key
    sections = json.loads(config_json)
    optim_cfg = json.loads(sections[1])
    if optim.runtime_lr(ml_collections.ConfigDict(optim_cfg)):
        optim_cfg["lr"] = None
    sections[1], sections[3] = json.dumps(optim_cfg), None
    return json.dumps(sections), mesh


def compiled(config, mesh):
    """The shardings and jitted init / train / eval functions of `config` on `mesh` (cached: runs
    with the same model, optimizer, steps, seed and mesh in one process share their compilations;
    the train and eval programs are shared by runs that differ only in seed or, under a constant
    schedule, peak rate)."""
    return _compiled(_key(config, mesh))


def replicated(value, sharding):
    """A numpy value as a jax.Array replicated over `sharding` (every process passes the same
    value; valid when the mesh spans several processes, unlike device_put of a host value)."""
    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda idx: np.asarray(value[idx]))


class _Bound:
    """A shared jitted program with its trailing arguments bound (a run's peak rate): called,
    traced and lowered like the jitted function with the leading arguments."""

    def __init__(self, program, *tail):
        self.program, self.tail = program, tail

    def __call__(self, *args):
        return self.program(*args, *self.tail)

    def trace(self, *args):
        return self.program.trace(*args, *self.tail)

    def lower(self, *args):
        return self.program.lower(*args, *self.tail)


def _compiled(key):
    """The functions of one run (see `compiled`): its seed's init functions (_run_init), and the
    shared programs (_programs) bound to its peak rate. step_fn(params, opt_state, rest, batch) is
    one train step, block_fn(params, opt_state, rest, batches [k, b, t], n, scale [k], scaled [k]) n
    of them in one dispatch (linscale_jax.train.blocks); jit compiles each on first use. Not cached
    itself, so a run always binds the programs _programs holds now."""
    sections = json.loads(key[0])
    progs = _programs(_program_key(key))
    init_params, rest = _run_init(key)
    lr = replicated(np.float32(json.loads(sections[1])["lr"]), progs.rep)
    return types.SimpleNamespace(
        **{k: v for k, v in vars(progs).items() if k not in ("step", "block")},
        init_params=init_params, rest=rest, step_fn=_Bound(progs.step, lr), block_fn=_Bound(progs.block, lr))


@functools.lru_cache(maxsize=8)
def _run_init(key):
    """(init_params, rest): the jitted initialisation of a run's model at its seed, placed as the
    programs' shardings say."""
    sections = json.loads(key[0])
    model_cfg = ModelConfig.from_config(json.loads(sections[0]))
    progs = _programs(_program_key(key))
    init = _init_fn(model_cfg, int(sections[3]))
    return (jax.jit(lambda: init()[0], out_shardings=progs.p_shard),
            jax.jit(lambda: init()[1], out_shardings=progs.rep))


def clear_caches() -> None:
    """Forget every cached program and init function (e.g. after building programs for another
    backend)."""
    _run_init.cache_clear()
    _programs.cache_clear()


@functools.lru_cache(maxsize=8)
def _programs(program_key):
    """Shardings and jitted train / eval programs of a (model, optimizer, steps, mesh); cached so
    that repeated runs in one process (tests, notebooks, a study worker's runs) reuse their
    compilations. step and block take the peak rate as their last argument (a float32 scalar;
    the optimizer's own optim.lr where the schedule keeps it: optim.runtime_lr)."""
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
    with_sharding = lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh)  # noqa: E731
    return types.SimpleNamespace(
        p_shard=p_shard, o_shard=o_shard, b_shard=b_shard, rep=rep,
        abs_params=jax.tree.map(with_sharding, parts.abstract_params, p_shard),
        abs_opt=jax.tree.map(with_sharding, abstract_opt, o_shard),
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


def scaled_steps(config, params, opt_state, step: int, factors, devices=None):
    """(params, opt_state) after len(factors) more updates from `step` (the arrays of checkpoint
    `step`, placed like the trainer's: fns.abs_params / abs_opt), on the run's own next batches,
    the update of step + j + 1 taken at factors[j] times the schedule's rate: params + f·(step(params)
    − params) (blocks: `scale`, `scaled`). The branches of study.cooldown; the run's own compiled
    block program, so a branch after its run compiles nothing."""
    from linscale_jax import data

    fns, _ = step_functions(config, devices)
    batches = GlobalBatches(data.train_rows(config), fns.b_shard)
    factors = np.asarray(factors, np.float32)
    k = blocks.block_steps(config)
    rest = fns.rest()
    plan = blocks.block_plan(0, len(factors), k, ())
    for (first, n), local in zip(plan, batches.blocks([(step + f, n) for f, n in plan], k)):
        scale = np.ones((k,), np.float32)
        scale[:n] = factors[first:first + n]
        batch = batches.put_block(local)
        params, opt_state, _ = fns.block_fn(params, opt_state, rest, batch,
                                            replicated(np.int32(n), fns.rep), replicated(scale, fns.rep),
                                            replicated(np.ones((k,), bool), fns.rep))
    return params, opt_state


def _say(msg: str) -> None:
    """A status line, printed by process 0 only."""
    if distributed.is_primary():
        print(msg, flush=True)


def train(config, workdir, init_from: str | None = None, devices=None,
          resume_step: int | None = None, allow_config_change: bool = False) -> dict:
    """Train (or resume) the run in `workdir`; returns {step, losses: {step: loss}, stopped}.

    The workdir is locked, checked and repaired first (linscale_jax.run.integrity): a config that
    changes the run is refused unless allow_config_change; resume_step=N resumes from checkpoint N
    and moves later ones aside (0: start over). A signal (linscale_jax.run.signals) during the step
    loop saves a checkpoint and returns with `stopped` set; one before it raises Stopped."""
    check_model(config)  # every model option, against train.seq_len, before the workdir is touched
    try:
        with integrity.guard(config, workdir, init_from, resume_step, allow_config_change) as g:
            return _train(config, workdir, init_from, devices, g)
    except signals.Interrupted as e:  # before the step loop: nothing to save
        raise Stopped(f"{e}: stopped before the first step, nothing to save; re-run the same "
                      "command to continue.") from None


def _train(config, workdir, init_from, devices, guard) -> dict:
    from linscale_jax import data
    from linscale_jax.models import accounting

    workdir = ckpt.as_path(workdir)
    if distributed.is_primary():
        workdir.mkdir(parents=True, exist_ok=True)
    distributed.barrier("linscale_workdir")
    enable_compilation_cache()
    tr = config.train
    total, seq_len, accum = int(tr.steps), int(tr.seq_len), int(tr.grad_accum)
    model_cfg = ModelConfig.from_config(config.model)
    mesh = sharding.make_mesh(config.mesh, devices)
    sharding.check_batch(int(tr.batch_size), seq_len, accum, mesh)
    if seq_len > model_cfg.max_seq_len:
        raise ValueError(f"train.seq_len={seq_len} exceeds model.max_seq_len={model_cfg.max_seq_len}.")

    rows = data.train_rows(config)  # data errors surface before compiling
    data.check_training(config, rows, say=_say)  # repeats: one warning line; too few eval rows: refused
    fns = compiled(config, mesh)
    abs_params, abs_opt, init_opt, b_shard = fns.abs_params, fns.abs_opt, fns.init_opt, fns.b_shard
    batches = GlobalBatches(rows, b_shard)  # batches(s): the global batch of update s + 1; each
    #                                         process reads only the rows its devices hold
    rest = fns.rest()

    mngr = ckpt.manager(workdir, config.checkpoint)
    restored = ckpt.restore(mngr, workdir, abs_params, abs_opt, shared=True)
    data_state, step = None, 0
    if restored is not None:
        step, params, data_state = restored["step"], restored["params"], restored["data"]
        opt_state = restored["opt_state"]
        _say(f"Resuming from {ckpt.ckpt_dir(workdir) / str(step)} (step {step}"
             f"{'' if opt_state is not None else ', params only: fresh optimizer'}).")
        if opt_state is None:
            opt_state = init_opt(params)
    elif init_from:
        src_dir, src_step = ckpt.resolve(init_from, None)
        steps = ckpt.list_steps(src_dir)
        if not steps:
            raise FileNotFoundError(f"--init_from={init_from}: no complete checkpoint there.")
        src_step = steps[-1] if src_step is None else src_step
        _check_init_compatible(config, ckpt.load_metadata(src_dir, src_step), init_from)
        src = ckpt.manager(src_dir, read_only=True)
        try:
            params = ckpt.restore(src, src_dir, abs_params, step=src_step)["params"]
        finally:
            src.close()
        opt_state = init_opt(params)
        _say(f"Initialised parameters from {src_dir} step {src_step}; fresh optimizer.")
    else:
        params = fns.init_params()
        opt_state = init_opt(params)

    stop = early_stop.EarlyStop(config, mesh, workdir, step)  # train.stop_at (linscale_jax.train.early_stop)
    if stop.done:  # the run stopped early at its target: nothing more to train
        total = step
    if data_state is not None:
        batches.check_state(data_state)  # the batches themselves follow from the step (a seek)

    block_fn, eval_fn = fns.block_fn, fns.eval_fn

    def to_global(batch):
        return sharding.global_batch(batch, b_shard, BATCH_KEYS)

    eval_every = int(tr.eval_every)
    eval_set = None
    if eval_every > 0:
        eval_set = [to_global(b) for b in data.eval_batches(
            config, split="validation", num_batches=int(tr.eval_batches))]

    tokens_per_step = int(tr.batch_size) * seq_len
    flops_tok = float(accounting.paper_flops_per_token(model_cfg, seq_len))
    flops_exact_tok = float(accounting.flops_per_token_exact(model_cfg, seq_len))
    peak = metrics_lib.peak_flops_per_device(config) * mesh.size
    schedule = jax.jit(optim.make_schedule(config.optim, total))  # a row's lr: one dispatch
    save_at = ckpt.save_steps(config.checkpoint, total)
    log_every = max(int(tr.log_every), 1)
    profiled = metrics_lib.parse_profile_steps(tr.get("profile_steps", ""))
    k = blocks.block_steps(config)  # blocks end at every step that logs, evaluates or saves
    plan = blocks.block_plan(step, total, k, blocks.every(log_every, step, total)
                             | blocks.every(eval_every, step, total) | save_at
                             | ({profiled[0] - 1, profiled[1]} if profiled else set()))
    scale, scaled = (replicated(x, fns.rep) for x in blocks.unscaled(k))
    steps_of = {n: replicated(np.int32(n), fns.rep) for n in {n for _, n in plan}}  # a block's n
    with signals.postponed():  # it rewrites metrics.jsonl without the rows after `step`
        logger = metrics_lib.MetricsLogger(workdir, total, step,
                                           tracker=tracking.wandb_writer(config, workdir))
    profile = metrics_lib.Profile(tr.get("profile_steps", ""), workdir)
    recorder = checksums.Recorder(jax.process_index(), jax.process_count())
    losses, pending, stopped, unrecorded = {}, [], None, []
    monitor = divergence.Monitor(step)
    saving = async_save.Pending(mngr, workdir)  # a failed background write stops the step it fails
    feed, batch0 = None, None

    def flush():
        """Fetch the pending blocks' metrics (the loop's one device->host transfer) -> a row of
        the last step; every step's loss goes through the divergence monitor."""
        nonlocal t_ref, n_ref, idle_ref
        fetched = jax.device_get([m for _, _, m in pending])
        for (first, n, _), m in zip(pending, fetched):
            for i in range(n):
                s, loss = first + i + 1, float(m["loss"][i])
                reason = monitor.observe(s, loss, bool(m["params_finite"][i]))
                if reason:
                    raise divergence.diverged(monitor, s, reason, float(m["grad_norm"][i]), workdir,
                                              mngr, float(config.optim.lr))
                losses[s] = loss
        first, n, _ = pending[-1]
        s, grad_norm = first + n, float(fetched[-1]["grad_norm"][n - 1])
        pending.clear()
        now = time.perf_counter()
        done, span = s - n_ref, max(now - (t_ref or t_start), 1e-9)
        tps = done * tokens_per_step / span
        mem, mem_peak = metrics_lib.device_memory()
        row = dict(step=s, loss=losses[s], lr=float(schedule(s - 1)),
                   grad_norm=grad_norm, tokens=s * tokens_per_step,
                   tokens_per_sec=tps, mfu=flops_exact_tok * tps / peak,
                   flops=flops_tok * s * tokens_per_step, mem_gb=mem / 1e9,
                   mem_peak_gb=None if mem_peak is None else mem_peak / 1e9,
                   data_wait=min((feed.idle_s - idle_ref) / span, 1.0))
        t_ref, n_ref, idle_ref = now, s, feed.idle_s
        return row

    def validation() -> dict:
        """The validation loss of the current parameters on train.eval_batches batches, and the
        early stop's metric (the loop's evaluation point: every train.eval_every steps and the
        last; stop.reached(row) judges it)."""
        sums = [eval_fn(params, rest, b) for b in eval_set]
        l, w = (sum(float(x[i]) for x in sums) for i in (0, 1))
        row = dict(val_loss=l / max(w, 1.0))
        row.update(stop.metrics(params, rest, eval_set))  # the stop's metric (early_stop)
        return row

    def finish_saves():
        """Wait for pending checkpoint writes; hand the finalised steps to the checksum thread."""
        saving.wait(step)  # names the checkpoint whose write failed
        for s in unrecorded:
            recorder.submit(ckpt.ckpt_dir(workdir) / str(s))
        unrecorded.clear()

    with Preemption() as preemption:  # from here a signal is a stop at the next block's end
        try:
            if plan:  # host rows of the blocks, read and put on the devices ahead
                feed = overlap.Prefetcher(batches.blocks(plan, k), batches.put_block, PREFETCH)
            t_compile = time.perf_counter()
            if feed is not None:  # compile before the clock starts: the first progress row is a rate
                batch0 = feed.next()
                block_fn.lower(params, opt_state, rest, batch0[0], steps_of[plan[0][1]], scale,
                               scaled).compile()
                print(f"Compiled the train step in {time.perf_counter() - t_compile:.1f}s (up to {k} "
                      f"steps per dispatch); training steps {step + 1}..{total}.", flush=True)
            t_ref, n_ref, t_start = None, step, time.perf_counter()
            idle_ref = feed.idle_s if feed is not None else 0.0
            logger.t0 = t_start
            last = None  # the last dispatched block's losses: busy until the devices finished it
            for first, n in plan:
                (batch, _), batch0 = (batch0 or feed.next(busy=last)), None
                profile.before(first + 1)
                params, opt_state, m = block_fn(params, opt_state, rest, batch, steps_of[n], scale,
                                                scaled)
                step = first + n
                saving.check(step)
                last = m["loss"]
                pending.append((first, n, m))
                profile.after(step, m)
                do_eval = eval_set is not None and (step % eval_every == 0 or step == total)
                do_log = step % log_every == 0 or step == total
                at_sync = do_log or do_eval or step in save_at  # steps that fetch metrics
                if at_sync:
                    row = flush()
                    if do_eval:
                        row.update(validation())
                        t_ref = time.perf_counter()
                    if do_log or do_eval:
                        logger.write(row)
                        logger.progress(row)
                reached = do_eval and stop.reached(row)  # train.stop_at met: save, then stop
                preempted = preemption.reached(step, at_sync)  # the same answer on every process
                if preempted and pending:
                    flush()  # the saved step's loss (checkpoint metadata), not a logged row
                if step in save_at or preempted or reached:
                    finish_saves()  # (Orbax waits for the previous save anyway)
                    logger.flush()
                    extra = dict(guard.metadata, **monitor.health_metadata(step, losses.get(step)),
                                 **stop.metadata(step, row if reached else None))
                    ckpt.save(mngr, step, params, ckpt.make_metadata(config, step, extra),
                              opt_state=opt_state, data_state=batches.state(step))
                    unrecorded.append(step)
                    saving.started(step)
                if reached:
                    _say(stop.line(step, row))
                    break
                if preempted:
                    stopped = preemption.name or "SIGTERM"
                    _say(f"{stopped}: saved checkpoint at step {step}; re-run the same command to "
                         "resume.")
                    break
        finally:
            if feed is not None:
                feed.close()
            profile.close()
            try:
                finish_saves()
            finally:
                recorder.close()  # the last checkpoint's hashes (off the step loop)
                mngr.close()
                logger.close()
    return dict(step=step, losses=losses, stopped=stopped, params=params)
