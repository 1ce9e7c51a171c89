"""The training loop: sharded state, jitted train step, exact resume, checkpoints, metrics.

    from linscale_jax.train import loop as trainer
    summary = trainer.train(config, workdir)                 # resumes from workdir's checkpoints
    summary = trainer.train(config, workdir, init_from=CKPT)  # start from converted weights

State lives as pure dicts of jax.Arrays: params (float32, sharded by linscale_jax.parallel.sharding) and the
optax state (sharded like the params). The step `train_step(params, opt_state, rest, batch)` is
jitted with in/out shardings and donates params and opt_state (linscale_jax.train.programs: one
set of programs per shape, shared by runs that differ in seed or constant peak rate). A global batch [b, t] is split into
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
(linscale_jax.run.checksums.Recorder). Checkpoints outside checkpoint.state_steps are eval-only
(parameters and metadata; linscale_jax.run.checkpoint.state_steps); a resume starts from the newest
one with the training state. train(..., scores=CheckpointScores(...)) scores each checkpoint's
val_loss from the parameters in memory and writes its eval row once the checkpoint is finalised
(linscale_jax.eval.checkpoint_scores), so eval restores nothing for it.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from linscale_jax.run import async_save
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.run import checksums
from linscale_jax.run import signals
from linscale_jax.train import blocks
from linscale_jax.train.programs import (  # noqa: F401  (the trainer's programs, re-exported)
    clear_caches, compiled, enable_compilation_cache, loss_sums, make_eval_step, make_train_step,
    replicated, step_functions)
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
          resume_step: int | None = None, allow_config_change: bool = False,
          scores=None) -> dict:
    """Train (or resume) the run in `workdir`; returns {step, losses: {step: loss}, stopped}.

    The workdir is locked, checked and repaired first (linscale_jax.run.integrity): a config that
    changes the run is refused unless allow_config_change; resume_step=N resumes from checkpoint N
    and moves later ones aside (0: start over). A signal (linscale_jax.run.signals) during the step
    loop saves a checkpoint and returns with `stopped` set; one before it raises Stopped.
    scores: an object whose score(step, params, metadata) the loop calls at each checkpoint's
    save (the parameters before the next block donates them) and write(steps) once those
    checkpoints are finalised (linscale_jax.eval.checkpoint_scores: each checkpoint's val_loss row
    scored from the parameters in memory, eval's row bit for bit)."""
    check_model(config)  # every model option, against train.seq_len, before the workdir is touched
    ckpt.state_steps(config.checkpoint, int(config.train.steps))  # a bad state_steps, likewise
    try:
        with integrity.guard(config, workdir, init_from, resume_step, allow_config_change) as g:
            return _train(config, workdir, init_from, devices, g, scores)
    except signals.Interrupted as e:  # before the step loop: nothing to save
        raise Stopped(f"{e}: stopped before the first step, nothing to save; re-run the same "
                      "command to continue.") from None


def _train(config, workdir, init_from, devices, guard, scores=None) -> dict:
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
    restored = ckpt.restore(mngr, workdir, abs_params, abs_opt, shared=True, resumable=True)
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
    state_at = ckpt.state_steps(config.checkpoint, total)  # None: every checkpoint is resumable
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
    monitor = divergence.Monitor(step, float(np.log(int(config.model.vocab_size))))
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
        if scores is not None:  # their rows, now that the checkpoints are finalised
            scores.write(unrecorded)
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
                    full = state_at is None or step in state_at or preempted or reached
                    if not full:  # eval-only: what eval reads (checkpoint.state_steps)
                        extra[ckpt.EVAL_ONLY] = True
                    meta = ckpt.make_metadata(config, step, extra)
                    ckpt.save(mngr, step, params, meta, opt_state=opt_state if full else None,
                              data_state=batches.state(step) if full else None)
                    if scores is not None:  # before the next block donates params
                        scores.score(step, params, meta)
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
            else:  # the last step: a loss still exploding there has no step left to recover in
                if monitor.at_end():
                    raise divergence.diverged(monitor, step, monitor.at_end(), float(row["grad_norm"]),
                                              workdir, mngr, float(config.optim.lr))
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
