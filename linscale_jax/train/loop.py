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

The step loop never waits on the devices between log steps: batches are read and put on the
devices by a background thread (linscale_jax.train.overlap), each step's metrics stay on the
devices until a log, eval or checkpoint step fetches them all at once, and preemption is decided by
JAX's preemption sync service (linscale_jax.train.preemption), a host-side call. Checkpoint
checksums are hashed per process in a background thread (linscale_jax.run.checksums.Recorder).
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
from linscale_jax.errors import Stopped

PREFETCH = 2  # batches read and put on the devices ahead of the running step

NonFiniteLossError = divergence.DivergenceError  # NaN/inf or exploding loss; checkpoints are kept


def loss_sums(model, batch):
    """(sum of weights * cross-entropy, sum of weights) over a batch of [b, t] arrays."""
    logits = model(batch["inputs"], segment_ids=batch["segment_ids"])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                         batch["targets"])
    w = batch["weights"].astype(jnp.float32)
    return jnp.sum(ce * w), jnp.sum(w)


def make_train_step(graphdef, tx, grad_accum: int):
    def grads_of(params, rest, mb):
        def f(p):
            return loss_sums(nnx.merge(graphdef, p, rest), mb)

        (l, w), g = jax.value_and_grad(f, has_aux=True)(params)
        return g, l, w

    def train_step(params, opt_state, rest, batch):
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


def compiled(config, mesh):
    """The shardings and jitted init / train / eval functions of `config` on `mesh` (cached: runs
    with the same model, optimizer, steps, seed and mesh in one process share their compilations)."""
    return _compiled(_key(config, mesh))


@functools.lru_cache(maxsize=8)
def _compiled(key):
    """Shardings and jitted functions of a (model, optimizer, mesh); cached so that repeated runs
    in one process (tests, notebooks) reuse their compilations."""
    config_json, mesh = key
    sections = json.loads(config_json)
    model_cfg = ModelConfig.from_config(json.loads(sections[0]))
    optim_cfg = ml_collections.ConfigDict(json.loads(sections[1]))
    steps, seed, accum = int(sections[2]), int(sections[3]), int(sections[4])
    parts = sharding.model_parts(model_cfg, seed)
    p_specs = sharding.param_specs(parts.abstract_params, parts.param_axes, mesh)
    p_shard = sharding.named(mesh, p_specs)
    tx = optim.make_optimizer(optim_cfg, steps, parts.param_axes, parts.abstract_params)
    abstract_opt = jax.eval_shape(tx.init, parts.abstract_params)
    o_shard = sharding.named(mesh, sharding.opt_state_specs(tx, abstract_opt, p_specs))
    rep = NamedSharding(mesh, PartitionSpec())
    b_shard = NamedSharding(mesh, sharding.batch_spec(mesh))
    with_sharding = lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh)  # noqa: E731
    init = _init_fn(model_cfg, seed)
    return types.SimpleNamespace(
        p_shard=p_shard, o_shard=o_shard, b_shard=b_shard, rep=rep,
        abs_params=jax.tree.map(with_sharding, parts.abstract_params, p_shard),
        abs_opt=jax.tree.map(with_sharding, abstract_opt, o_shard),
        init_params=jax.jit(lambda: init()[0], out_shardings=p_shard),
        init_opt=jax.jit(tx.init, out_shardings=o_shard),
        rest=jax.jit(lambda: init()[1], out_shardings=rep),
        step_fn=jax.jit(_under_mesh(make_train_step(parts.graphdef, tx, accum), mesh),
                        in_shardings=(p_shard, o_shard, rep, b_shard),
                        out_shardings=(p_shard, o_shard, rep), donate_argnums=(0, 1)),
        eval_fn=jax.jit(_under_mesh(make_eval_step(parts.graphdef), mesh), in_shardings=(p_shard, rep, b_shard)),
    )


def step_functions(config, devices=None):
    """(jitted functions of the run's model, optimizer and mesh, the mesh): the same cached objects
    the trainer uses in this process, so a caller reusing them (study.cooldown) compiles nothing."""
    mesh = sharding.make_mesh(config.mesh, devices)
    return _compiled(_key(config, mesh)), mesh


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

    step_fn, eval_fn = fns.step_fn, fns.eval_fn

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
    schedule = optim.make_schedule(config.optim, total)
    save_at = ckpt.save_steps(config.checkpoint, total)
    log_every = max(int(tr.log_every), 1)
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
        """Fetch the pending steps' metrics (the loop's one device->host transfer) -> a row."""
        nonlocal t_ref, n_ref, idle_ref
        fetched = jax.device_get([m for _, m in pending])
        for (s, _), m in zip(pending, fetched):
            loss = float(m["loss"])
            reason = monitor.observe(s, loss, bool(m["params_finite"]))
            if reason:
                raise divergence.diverged(monitor, s, reason, float(m["grad_norm"]), workdir,
                                          mngr, float(config.optim.lr))
            losses[s] = loss
        s, m = pending[-1][0], fetched[-1]
        pending.clear()
        now = time.perf_counter()
        done, span = s - n_ref, max(now - (t_ref or t_start), 1e-9)
        tps = done * tokens_per_step / span
        mem, mem_peak = metrics_lib.device_memory()
        row = dict(step=s, loss=losses[s], lr=float(schedule(s - 1)),
                   grad_norm=float(m["grad_norm"]), tokens=s * tokens_per_step,
                   tokens_per_sec=tps, mfu=flops_exact_tok * tps / peak,
                   flops=flops_tok * s * tokens_per_step, mem_gb=mem / 1e9,
                   mem_peak_gb=None if mem_peak is None else mem_peak / 1e9,
                   data_wait=min((feed.idle_s - idle_ref) / span, 1.0))
        t_ref, n_ref, idle_ref = now, s, feed.idle_s
        return row

    def finish_saves():
        """Wait for pending checkpoint writes; hand the finalised steps to the checksum thread."""
        saving.wait(step)  # names the checkpoint whose write failed
        for s in unrecorded:
            recorder.submit(ckpt.ckpt_dir(workdir) / str(s))
        unrecorded.clear()

    with Preemption() as preemption:  # from here a signal is a stop at the next step
        try:
            if step < total:  # host rows of steps step..total-1, read and put on the devices ahead
                host_rows = (batches.local(s) for s in range(step, total))
                feed = overlap.Prefetcher(host_rows, batches.put, PREFETCH)
            t_compile = time.perf_counter()
            if feed is not None:  # compile before the clock starts: the first progress row is a rate
                batch0 = feed.next()
                step_fn.lower(params, opt_state, rest, batch0[0]).compile()
                print(f"Compiled the train step in {time.perf_counter() - t_compile:.1f}s; training "
                      f"steps {step + 1}..{total}.", flush=True)
            t_ref, n_ref, t_start = None, step, time.perf_counter()
            idle_ref = feed.idle_s if feed is not None else 0.0
            logger.t0 = t_start
            last = None  # the last dispatched step's loss: busy until the devices finished it
            while step < total:
                (batch, _), batch0 = (batch0 or feed.next(busy=last)), None
                profile.before(step + 1)
                params, opt_state, m = step_fn(params, opt_state, rest, batch)
                step += 1
                saving.check(step)
                last = m["loss"]
                pending.append((step, m))
                profile.after(step, m)
                do_eval = eval_set is not None and (step % eval_every == 0 or step == total)
                do_log = step % log_every == 0 or step == total
                at_sync = do_log or do_eval or step in save_at  # steps that fetch metrics
                if at_sync:
                    row = flush()
                    if do_eval:
                        sums = [eval_fn(params, rest, b) for b in eval_set]
                        l, w = (sum(float(x[i]) for x in sums) for i in (0, 1))
                        row["val_loss"] = l / max(w, 1.0)
                        row.update(stop.metrics(params, rest, eval_set))  # the stop's metric (early_stop)
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
