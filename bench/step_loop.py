"""The trainer's whole loop against its compiled step alone, per ladder rung, as a study worker runs it.

    python bench/step_loop.py [--config=cpu] [--archs=llama,tnl,hgrn2,cosformer2]
                              [--sizes=d16l2,d16,d32l2,d32,d48] [--steps=N] [--core=0] [--json]
                              [--compile_cache=fresh|shared|DIR] [--seed=N] [--cooldowns]
                              [--checkpoint_eval=trainer|restore|both]

Each rung's run config is the preset's own (study.plan.build_plan: model, the tuned rule's lr,
batch and beta2, log and checkpoint cadence, eval batches); --steps shortens a run to N steps and
keeps every cadence (default: the preset's steps). The process runs as a study worker: pinned to
one core (--core), single-threaded XLA (study.backends.SINGLE_THREAD) with its own fusions
(parallel.cpu_codegen), the workers' malloc settings, huge pages, the persistent compilation
cache. Per rung, in one process:

  loop   trainer.train(config, workdir, scores=CheckpointScores(...)), then eval.runner.evaluate of every
         checkpoint with the study's eval context (val_loss): runner.process_run's training and
         checkpoint evaluation (the trainer scores each checkpoint's val_loss from its parameters
         in memory, so eval finds the rows done). --checkpoint_eval=restore: the trainer scores
         nothing and eval restores and scores each checkpoint; =both: one loop of each (trainer
         first at the 1st, 3rd, ... rung, restore first at the others), each from fresh in-process caches (programs, models, validation sets; the
         persistent compilation cache kept), beside one step alone: a row per loop
  step   the same compiled train step alone (trainer.compiled), dispatched back to back on one
         device batch; bursts before and after the loop, median per step

ratio = step seconds x steps / loop seconds; loop_tokens_per_sec and step_tokens_per_sec count the
run's training tokens. `parts` splits the loop's seconds (CPU time of background threads counts:
on one core it is taken from the step):
  step        steps x the step alone
  compile     XLA compilations and persistent-cache reads (jax's monitoring events), train and eval
  data        rows read and put on the device (train.batches: read, put), any thread
  dispatch    the Python calls that launch the steps (jit dispatch)
  metrics     metric rows: device->host fetches (after the step finished), rows written, progress
  checkpoint  checkpoint writes, their waits and checksum hashing
  eval        checkpoint evaluation beyond its compilation: the trainer's scoring of its checkpoints
              (dispatch and wait) and eval's loading and scoring of the rest
  other       the rest: start-up (locks, records, restore), the loop's own bookkeeping, the load
(the instruments: bench/loop_parts.py)
Wall seconds are those of a shared machine: the header prints the load average; ratios are
measured side by side in one process.
--json prints one object {"rows": [{"arch", "size", "checkpoint_eval", "steps", "loop_tokens_per_sec",
"step_tokens_per_sec", "ratio", "parts": {part: seconds}, "programs": [{"name", "lower",
"compile", "cache_hit"}]}], "load": [1, 5, 15 min]}: `programs` lists every program the run's loop,
eval and cooldowns compiled, in order (wall seconds of lowering and of XLA's compilation or the
persistent cache's read; ProgramLog).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loop_parts import PARTS, Clock, CompileClock, ProgramLog, instrumented  # noqa: E402


def as_worker(core: int) -> None:
    """This process as a study worker's: the workers' environment (re-executing once so glibc and
    XLA read it at start), pinned to `core`."""
    from linscale_jax.parallel import cpu_codegen, host_memory
    from linscale_jax.study.backends import MALLOC_ENV, SINGLE_THREAD

    env = dict(os.environ)
    cpu_codegen.use_xla_fusions(env)  # as `python -m linscale_jax.study` sets for its workers
    flags = env.get("XLA_FLAGS", "")
    missing = (flags != os.environ.get("XLA_FLAGS", "") or SINGLE_THREAD not in flags
               or any(k not in env for k in MALLOC_ENV))
    if missing:
        env["XLA_FLAGS"] = flags if SINGLE_THREAD in flags else f"{flags} {SINGLE_THREAD}".strip()
        for k, v in MALLOC_ENV.items():
            env.setdefault(k, v)
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    host_memory.use_huge_pages()
    os.sched_setaffinity(0, {core})


@contextlib.contextmanager
def quiet():
    """File descriptors 1 and 2 to /dev/null (progress bars, absl, XLA), restored after."""
    from linscale_jax.study.backends import redirect

    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        redirect(null)
        yield
    finally:
        redirect(*saved)
        for fd in (null, *saved):
            os.close(fd)


def step_alone(config, n: int, bursts: int) -> dict:
    """The run's compiled train step alone, `n` steps back to back per burst: median seconds per
    step by the process's CPU time ("cpu") and by the wall clock ("wall"), and the CPU seconds per
    step of the dispatching calls ("dispatch")."""
    import jax
    import numpy as np

    from linscale_jax.parallel import sharding
    from linscale_jax.train import loop as trainer

    fns, _ = trainer.step_functions(config, jax.devices()[:1])
    params, rest = fns.init_params(), fns.rest()
    opt = fns.init_opt(params)
    b, t = int(config.train.batch_size), int(config.train.seq_len)
    tokens = np.random.default_rng(0).integers(0, 256, (b, t + 1), dtype=np.int32)
    batch = sharding.global_batch(dict(inputs=tokens[:, :-1], targets=tokens[:, 1:],
                                       segment_ids=np.ones((b, t), np.int32),
                                       weights=np.ones((b, t), np.float32)), fns.b_shard)
    params, opt, m = fns.step_fn(params, opt, rest, batch)
    jax.block_until_ready(m)
    cpu, wall, dispatch = [], [], []
    for _ in range(bursts):
        c0, w0, d = time.process_time(), time.perf_counter(), 0.0
        for _ in range(n):
            t0 = time.thread_time()
            params, opt, m = fns.step_fn(params, opt, rest, batch)
            d += time.thread_time() - t0
        jax.block_until_ready((params, m))
        cpu.append((time.process_time() - c0) / n)
        wall.append((time.perf_counter() - w0) / n)
        dispatch.append(d / n)
    return {k: float(np.median(v)) for k, v in (("cpu", cpu), ("wall", wall), ("dispatch", dispatch))}


def _study_module(name: str):
    """linscale_jax.study.scaling.<name> (linscale_jax.study.<name> in a checkout before the study's
    kinds: the bench measures that code too)."""
    import importlib

    try:
        return importlib.import_module(f"linscale_jax.study.scaling.{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"linscale_jax.study.{name}")


def fresh_process_caches() -> None:
    """The in-process caches of programs, models and validation sets emptied (the persistent
    compilation cache kept): the next loop starts as a worker's first run of its shape."""
    import jax

    from linscale_jax.eval import val_loss
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.train import loop as trainer

    jax.clear_caches()
    trainer.clear_caches()
    for f in (val_loss.nll_fn, getattr(ckpt, "_model_parts", None), getattr(ckpt, "_rest_arrays", None)):
        if f is not None:
            f.cache_clear()
    val_loss._VAL_SETS.clear()
    val_loss._LAST.clear()


def one_loop(study, run, cfg, compiling: CompileClock, program_log: ProgramLog, in_trainer: bool,
             cooldowns: bool) -> dict:
    """The loop of one run (train + checkpoint eval) in a scratch workdir: its CPU and wall
    seconds, parts and programs. in_trainer: the trainer scores each checkpoint's val_loss from
    its parameters in memory (train(..., scores=...), as the study's runner trains); else eval
    restores every checkpoint and scores it."""
    import dataclasses

    from linscale_jax.eval.runner import evaluate
    from linscale_jax.train import loop as trainer
    try:
        from linscale_jax.eval.checkpoint_scores import CheckpointScores
    except ImportError:  # a checkout before the trainer scored its checkpoints: restore only
        CheckpointScores, in_trainer = None, False

    runner = _study_module("runner")
    ctx = runner.eval_context(study, run)
    clock = Clock()
    workdir = tempfile.mkdtemp(prefix=f"step_loop_{run.name}_")
    run = dataclasses.replace(run, workdir=workdir)
    cool = {}
    try:
        c0, p0, w0 = compiling.seconds, time.process_time(), time.perf_counter()
        i0 = len(program_log.rows)
        with instrumented(clock, compiling), quiet():
            scores = CheckpointScores(cfg, workdir, ctx["val_batches"]) if in_trainer else None
            trainer.train(cfg, workdir, scores=scores)
            c1, p1 = compiling.seconds, time.process_time()
            evaluate(workdir, "all", runner.loss_tasks(study), ctx_kwargs=ctx, log=lambda m: None)
        c2, p2, w2 = compiling.seconds, time.process_time(), time.perf_counter()
        if cooldowns and "cooldown" in runner.estimators(study):
            with quiet():
                runner.run_cooldowns(study, run, ctx, log=lambda m: None)
            cool = dict(cooldown_cpu_s=round(time.process_time() - p2, 2),
                        cooldown_compile_s=round(compiling.seconds - c2, 2))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    parts = dict(clock.s, compile=c2 - c0, eval=clock.s["eval"] + max((p2 - p1) - (c2 - c1), 0.0))
    return dict(cpu=p2 - p0, wall=w2 - w0, train_cpu=p1 - p0, parts=parts, cool=cool,
                programs=program_log.since(i0))  # the loop's, eval's and cooldowns' programs


def bench_run(study, run, steps: int | None, burst: int, bursts: int, compiling: CompileClock,
              program_log: ProgramLog, cooldowns: bool = False, seed: int | None = None,
              eval_only: bool = False, modes=("trainer",)) -> list[dict]:
    """One rung: its loop once per mode of `modes` ("trainer": each checkpoint's val_loss scored
    by the trainer from the parameters in memory, as the study trains; "restore": eval restores
    and scores each checkpoint), each from fresh in-process caches, then the step alone once,
    shared by the rows (with `eval_only`, the checkpoints outside the run's cooldown branch steps
    hold parameters only: checkpoint.state_steps); with `cooldowns`, the study's cooldown branches
    of the run after them (trained and evaluated as runner.process_run does), timed apart."""
    cfg = run.config
    if seed is not None:
        cfg.train.seed = int(seed)
    if steps:
        cfg.train.steps = int(steps)
    if eval_only:
        cooldown = _study_module("cooldown")
        cfg.checkpoint.state_steps = ",".join(str(s) for s in cooldown.branch_steps(cfg, int(study.cooldown.points)))
    n = int(cfg.train.steps)
    loops = []
    for mode in modes:
        fresh_process_caches()
        loops.append((mode, one_loop(study, run, cfg, compiling, program_log, mode == "trainer", cooldowns)))
    step = step_alone(cfg, burst, bursts)  # after the loops: the loops pay the compilation
    tokens = n * int(cfg.train.batch_size) * int(cfg.train.seq_len)
    rows = []
    for mode, lp in loops:
        parts = dict(lp["parts"], step=(step["cpu"] - step["dispatch"]) * n)
        parts["other"] = lp["cpu"] - sum(v for k, v in parts.items() if k != "other")
        parts = {k: parts[k] for k in PARTS}
        rows.append(dict(arch=run.arch, size=run.size, steps=n, checkpoint_eval=mode,
                         loop_tokens_per_sec=round(tokens / lp["cpu"], 1),
                         step_tokens_per_sec=round(tokens / (step["cpu"] * n), 1),
                         ratio=round(step["cpu"] * n / lp["cpu"], 3),
                         ratio_wall=round(step["wall"] * n / lp["wall"], 3),
                         loop_cpu_s=round(lp["cpu"], 2), loop_wall_s=round(lp["wall"], 2),
                         train_cpu_s=round(lp["train_cpu"], 2), **lp["cool"],
                         step_ms=round(step["cpu"] * 1e3, 3),
                         parts={k: round(v, 2) for k, v in parts.items()}, programs=lp["programs"]))
    return rows


def warm_up(config) -> None:
    """What a study worker has loaded after its first run (TensorFlow for the metrics' event files
    and the vocabulary, the MFU peak), so that the first rung does not pay the process's start-up."""
    from linscale_jax import data
    from linscale_jax.train import metrics

    scratch = tempfile.mkdtemp(prefix="step_loop_warm_")
    try:
        with quiet():
            write = metrics._tensorboard_writer(metrics.epath.Path(scratch))
            if write is not None:
                write(dict(step=1, loss=1.0))
                write(None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    data.get_vocabulary(config.data)
    metrics.peak_flops_per_device(config)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="cpu", help="a study preset: a packaged name or a file")
    p.add_argument("--archs", default=None, help="comma list (default: the preset's)")
    p.add_argument("--sizes", default=None, help="comma list (default: the preset's)")
    p.add_argument("--steps", type=int, default=0, help="steps per run (default: the preset's)")
    p.add_argument("--core", type=int, default=0, help="the one core this process runs on")
    p.add_argument("--burst", type=int, default=50, help="steps per timed burst of the step alone")
    p.add_argument("--bursts", type=int, default=7, help="bursts of the step alone after each loop")
    p.add_argument("--compile_cache", default="fresh",
                   help="the persistent compilation cache: 'fresh' (an empty directory: every rung "
                        "compiles, as in a fresh clone), 'shared' (the trainer's default) or a "
                        "directory (pass one twice to see the cache's hits)")
    p.add_argument("--cooldowns", action="store_true",
                   help="also the study's cooldown branches of each run (trained and evaluated), "
                        "timed apart: cooldown_cpu_s; a run's whole CPU cost is loop_cpu_s + that")
    p.add_argument("--seed", type=int, default=None,
                   help="train.seed of every run (default: the preset's); a second invocation on the "
                        "same --compile_cache with another seed is a study's replicate seed")
    p.add_argument("--eval_only_checkpoints", action="store_true",
                   help="checkpoint.state_steps = each run's cooldown branch steps (the other "
                        "checkpoints hold parameters only; the studies keep them all resumable)")
    p.add_argument("--checkpoint_eval", default="trainer", choices=("trainer", "restore", "both"),
                   help="who scores each checkpoint's val_loss: the trainer from the parameters in "
                        "memory (as the study trains), eval after restoring it, or both, one loop "
                        "each from fresh in-process caches (their order alternating by rung), sharing the step alone")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    as_worker(a.core)
    import jax

    from linscale_jax.study import presets

    plan = _study_module("plan")
    from linscale_jax.train import loop as trainer

    study = presets.preset(a.config)  # a packaged preset's name or a preset file
    if a.archs:
        study.archs = a.archs
    if a.sizes:
        study.sizes = a.sizes
    study.replicates.update(sizes="", seeds=0)
    scratch_cache = None
    if a.compile_cache == "fresh":
        scratch_cache = tempfile.mkdtemp(prefix="step_loop_xla_")
    cache = trainer.enable_compilation_cache(
        scratch_cache or (None if a.compile_cache == "shared" else a.compile_cache))
    compiling, program_log = CompileClock(), ProgramLog()
    load = [round(x, 2) for x in os.getloadavg()]
    runs = plan.build_plan(study, tempfile.gettempdir())
    warm_up(runs[0].config)
    if not a.json:
        print(f"{a.config}: {len(runs)} rung(s), one core ({a.core}), single-threaded XLA, "
              f"compilation cache {cache}; load average {load} on {os.cpu_count()} cores",
              flush=True)
        extra = " cooldowns CPU s |" if a.cooldowns else ""
        print("| arch | size | checkpoint eval | steps | loop tok/s | step tok/s | ratio | " +
              " | ".join(f"{k} s" for k in PARTS) + " |" + extra)
        print("|---|---|---|---|---|---|---|" + "---|" * (len(PARTS) + bool(extra)), flush=True)
    rows = []
    modes = ("trainer", "restore") if a.checkpoint_eval == "both" else (a.checkpoint_eval,)
    for i, run in enumerate(runs):  # with both: trainer first at even rungs, restore at odd ones
        order = modes[::-1] if i % 2 else modes
        for r in bench_run(study, run, a.steps or None, a.burst, a.bursts, compiling, program_log,
                           a.cooldowns, a.seed, a.eval_only_checkpoints, order):
            rows.append(r)
            if a.json:  # progress on stderr; the one JSON object at the end
                print(json.dumps(r), file=sys.stderr, flush=True)
                continue
            print(f"| {r['arch']} | {r['size']} | {r['checkpoint_eval']} | {r['steps']} | "
                  f"{r['loop_tokens_per_sec']:,.0f} | {r['step_tokens_per_sec']:,.0f} | {r['ratio']:.2f} | " +
                  " | ".join(f"{r['parts'][k]:.2f}" for k in PARTS) + " |" +
                  (f" {r.get('cooldown_cpu_s', float('nan')):.2f} |" if a.cooldowns else ""), flush=True)
    if scratch_cache:
        shutil.rmtree(scratch_cache, ignore_errors=True)
    if a.json:
        print(json.dumps(dict(rows=rows, load=load, load_end=[round(x, 2) for x in os.getloadavg()])))
    else:
        print(f"load average at the end: {[round(x, 2) for x in os.getloadavg()]}")


if __name__ == "__main__":
    main()
