"""Evaluate a run's checkpoints × tasks, appending one row per (checkpoint, task) to
DIR/eval/results.jsonl (or OUT/results.jsonl with out=OUT: checkpoints on a read-only mount);
pairs already there are skipped, so a killed or repeated run resumes.

    rows = evaluate(workdir, steps="all", tasks=("val_loss",), ctx_kwargs=None, out=None)

Each row: task, step, tokens, flops (paper C), flops_exact, n_params (non-embedding), arch, run,
eval_seconds, and the task's metric fields (e.g. val_loss). Rows are flushed one by one; with the
run's train.wandb set they go to its Weights & Biases run too (linscale_jax.train.tracking).
All checkpoints of a run must share one model config (arch and shapes): a checkpoint from another
architecture or config is an error naming the differing fields. A checkpoint that cannot be read
(damaged files, unreadable metadata, a failed checksum) is skipped with one line naming the step
and what is wrong, the others are evaluated, and evaluate() then raises DamagedCheckpoints naming
every skipped step (the command exits 1; rows already written stay).
"""

from __future__ import annotations

import json
import os
import tempfile
import time

from linscale_jax.eval.loading import EvalError, checkpoint_steps, load_run
from linscale_jax import contract
from linscale_jax.eval.suite import TASKS, TaskContext
from linscale_jax.errors import UserError
from linscale_jax.run.checksums import CheckpointCorruptError

ROW_KEYS = contract.METADATA_COLUMNS  # the table columns each row copies from checkpoint metadata


def results_path(workdir: str, out: str | None = None) -> str:
    """DIR/eval/results.jsonl, or OUT/results.jsonl."""
    if out is not None:
        return os.path.join(out, os.path.basename(contract.EVAL_RESULTS))
    return os.path.join(workdir, contract.EVAL_RESULTS)


def check_writable(workdir: str, out: str | None) -> None:
    """The results directory can be created and written (probed with a file that is removed)."""
    path = os.path.dirname(results_path(workdir, out))
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-probe-"):
            pass
    except OSError as e:
        fix = ("pass --out=DIR to write the results elsewhere (the checkpoints are only read)"
               if out is None else "pass a writable --out")
        raise EvalError(f"cannot write eval results to {path} ({e.strerror or e}); {fix}") from e


def read_results(workdir: str, repair: bool = False, out: str | None = None) -> list[dict]:
    """Rows of DIR/eval/results.jsonl (OUT/results.jsonl). A torn last line (a killed run) is
    ignored, and dropped from the file when repair=True; a bad line elsewhere is an error naming it."""
    path = results_path(workdir, out)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    rows, good = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
            good.append(line)
        except json.JSONDecodeError as e:
            if any(x.strip() for x in lines[n:]):
                raise EvalError(f"{path}:{n} is not valid JSON ({e.msg}); fix or delete that line") from e
            if repair:  # rewritten whole (a stop or a crash in between keeps the old file)
                with open(path + ".tmp", "w", encoding="utf-8") as f:
                    f.write("".join(x + "\n" for x in good))
                os.replace(path + ".tmp", path)
    return rows


def make_row(task: str, meta: dict, seconds: float, metrics: dict) -> dict:
    """One results row: the task, the checkpoint metadata's table columns, the seconds, the metrics."""
    return {"task": task, **{k: meta.get(k) for k in ROW_KEYS}, "eval_seconds": round(seconds, 3), **metrics}


def append_row(workdir: str, row: dict, out: str | None = None) -> None:
    """`row` appended to DIR/eval/results.jsonl (OUT/results.jsonl), one line, flushed."""
    with open(results_path(workdir, out), "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def parse_tasks(tasks) -> list[str]:
    names = contract.split_list(tasks)
    bad = [t for t in names if t not in TASKS]
    if bad or not names:
        raise EvalError(f"unknown task(s) {bad or names}; known tasks: {', '.join(TASKS)}")
    return names


def select_steps(spec, available: list[int]) -> list[int]:
    if spec in (None, "all"):
        return list(available)
    if spec == "last":
        return available[-1:]
    try:
        want = [int(s) for s in contract.split_list(spec)]
    except ValueError as e:
        raise EvalError(f"--steps must be all, last or a comma list of integers; got {spec!r}") from e
    missing = [s for s in want if s not in available]
    if missing:
        raise EvalError(f"no checkpoint at step(s) {missing}; available: {available}")
    return sorted(set(want))


def check_same_model(workdir: str, metas: dict[int, dict]) -> None:
    """Every checkpoint's model section must equal the newest one's (a field that an older
    checkpoint does not store counts at its default, as the model builds it)."""
    ref_step = max(metas)
    ref = metas[ref_step]["config"]["model"]
    for s, m in metas.items():
        cur = m["config"]["model"]
        if _same_model(ref, cur):
            continue
        diff = sorted(k for k in set(ref) | set(cur) if ref.get(k) != cur.get(k))
        if diff:
            detail = ", ".join(f"{k}: {cur.get(k)!r} vs {ref.get(k)!r}" for k in diff[:6])
            raise EvalError(f"checkpoint step {s} in {workdir} comes from another architecture/config than "
                            f"step {ref_step} ({detail}); keep one run per workdir and evaluate the "
                            "other run from its own workdir")


def _same_model(a: dict, b: dict) -> bool:
    """Whether two stored model sections build the same ModelConfig (missing fields at defaults)."""
    from linscale_jax.models import ModelConfig

    try:
        return ModelConfig(**a) == ModelConfig(**b)
    except (TypeError, ValueError):
        return a == b


def _cell_progress(log, prefix):
    """progress(done, total) for long tasks (NIAH cells): a line at every 20% with the ETA."""
    t0 = time.time()

    def progress(done, total):
        if done == total or done % max(1, total // 5) == 0:
            el = time.time() - t0
            log(f"{prefix}: {done}/{total} ({el:.0f}s, ETA {el / done * (total - done):.0f}s)")

    return progress


def _fmt(metrics: dict) -> str:
    keys = [k for k in metrics if isinstance(metrics[k], float)][:4]
    return " ".join(f"{k}={metrics[k]:.4g}" for k in keys)


def evaluate(workdir: str, steps="all", tasks=("val_loss",), ctx_kwargs: dict | None = None,
             log=print, out: str | None = None) -> list[dict]:
    from linscale_jax.run import checkpoint as ckpt

    names = parse_tasks(tasks)
    selected = select_steps(steps, checkpoint_steps(workdir))
    damaged, metas = {}, {}
    for s in selected:
        try:
            metas[s] = ckpt.load_metadata(workdir, s)
        except Exception as e:  # noqa: BLE001 - one damaged checkpoint must not abort the rest
            damaged[s] = _what_is_wrong(e)
    if not metas:
        raise DamagedCheckpoints(_skipped_line(workdir, damaged, []))
    selected = sorted(metas)
    check_same_model(workdir, metas)
    from linscale_jax.parallel import distributed

    primary = distributed.is_primary()  # process 0 alone writes results.jsonl and reports
    if not primary:
        log = lambda *_: None  # noqa: E731
    if primary:
        check_writable(workdir, out)
    existing = read_results(workdir, repair=primary, out=out)
    arch = metas[selected[-1]].get("arch")
    other = {r.get("arch") for r in existing} - {arch}
    if other:
        raise EvalError(f"{results_path(workdir, out)} holds rows of arch {sorted(other)} but the checkpoints "
                        f"are {arch!r}; the results file belongs to another run")
    done = {(r["step"], r["task"]) for r in existing}
    todo = [(s, t) for s in selected for t in names if (s, t) not in done]
    log(f"eval {workdir}: {len(selected)} checkpoint(s) x {len(names)} task(s); "
        f"{len(selected) * len(names) - len(todo)} done before, {len(todo)} to do")
    rows, t_start, loaded = [], time.time(), None
    for s, what in sorted(damaged.items()):
        log(f"WARNING: skipping checkpoint step {s}: {what}")
    for i, (step, task) in enumerate(todo, 1):
        if loaded is None or loaded[0] != step:
            try:
                loaded = (step, load_run(workdir, step))
            except Exception as e:  # noqa: BLE001 - one damaged checkpoint must not abort the rest
                damaged[step] = _what_is_wrong(e)
                log(f"WARNING: skipping checkpoint step {step}: {damaged[step]}")
                loaded = (step, None)
        if loaded[1] is None:
            continue
        run, meta = loaded[1], metas[step]
        ctx = TaskContext(workdir=workdir, step=step, **(ctx_kwargs or {}))
        if ctx.progress is None:
            ctx.progress = _cell_progress(log, f"  step {step} {task}")
        t0 = time.time()
        metrics = TASKS[task](run, ctx)
        row = make_row(task, meta, time.time() - t0, metrics)
        if primary:
            append_row(workdir, row, out)
        rows.append(row)
        elapsed = time.time() - t_start
        eta = elapsed / i * (len(todo) - i)
        log(f"eval [{i}/{len(todo)}] step {step} {task}: {_fmt(metrics)} ({row['eval_seconds']:.1f}s) "
            f"| elapsed {elapsed:.0f}s ETA {eta:.0f}s")
    if primary and rows:  # train.wandb: the rows in the run's W&B run too
        from linscale_jax.train import tracking

        meta = metas[selected[-1]]
        tracking.log_eval(workdir, meta.get("config", {}), rows, meta.get("cooldown_from"))
    if damaged:
        raise DamagedCheckpoints(_skipped_line(workdir, damaged, rows, out))
    return rows


class DamagedCheckpoints(EvalError):
    """Checkpoints that could not be read were skipped; the others were evaluated (the message
    names each skipped step and what is wrong with it)."""


def _what_is_wrong(e: BaseException) -> str:
    """What a checkpoint's failure to load says, in one line (the storage line for a storage
    failure)."""
    from linscale_jax.run import storage

    if isinstance(e, (KeyboardInterrupt, SystemExit)) or (
            isinstance(e, UserError) and not isinstance(e, CheckpointCorruptError)):
        raise e  # a stop, or a problem of the run rather than of one checkpoint
    line = storage.storage_line(e, None, "eval")
    text = line or (str(e).strip().splitlines() or [type(e).__name__])[0]
    return f"{type(e).__name__}: {text[:300]}" if not isinstance(e, CheckpointCorruptError) else text


def _skipped_line(workdir: str, damaged: dict, rows: list, out: str | None = None) -> str:
    what = "; ".join(f"step {s}: {damaged[s]}" for s in sorted(damaged))
    done = (f"the other checkpoints were evaluated ({len(rows)} new row(s) in {results_path(workdir, out)})"
            if rows else "no other checkpoint had rows left to evaluate")
    return (f"{len(damaged)} checkpoint(s) of {workdir} could not be read and were skipped ({what}); "
            f"{done}; move the damaged step directories out of "
            f"{os.path.join(workdir, contract.CHECKPOINTS)} (resuming the run's training does that for "
            "the newest) or leave them out with --steps, then re-run the same command")
