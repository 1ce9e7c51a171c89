"""Weights & Biases beside metrics.jsonl and TensorBoard: --config.train.wandb=PROJECT (the [track] extra).

    log = wandb_writer(config, workdir)      # None when train.wandb is empty
    log(row) ... log(None)                   # a metrics row; None finishes the W&B run
    log_eval(workdir, stored_config, rows)   # eval rows of a checkpoint workdir (eval.runner)

One W&B run per workdir, named after the run (config.name), with the run's config as its W&B config
and train.wandb_group as its group (a study sets it to its directory's name, so a study's runs, their
cooldown branches and their evaluation rows are one group). The W&B run id is kept in
DIR/wandb.json, so a resume (another process, attempt or host) continues the same W&B run
(resume="allow"). Training rows are logged as train/<key> with train/step as their x-axis, and
evaluation rows as eval/<task>/<metric> with eval/step (the checkpoint's step): never W&B's own step
counter, so a resume's repeated steps and an evaluation after training are all kept. A cooldown
branch's workdir (DIR/cooldowns/<step>) gets its own W&B run, job type "cooldown".
W&B files go to $WANDB_DIR, else DIR/wandb (local workdirs) or the temp directory (gs://).
WANDB_MODE=offline works without a network (`wandb sync` uploads later). Only process 0 logs.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import uuid

from linscale_jax import contract
from linscale_jax.run.extras import MissingExtra

STATE = "wandb.json"  # DIR/wandb.json: {"id", "project", "group"} of the workdir's W&B run


class TrackingError(ValueError):
    """train.wandb is set but W&B cannot be used (message: the fix)."""


def _wandb():
    try:
        import wandb
    except ModuleNotFoundError as e:
        if e.name != "wandb":
            raise
        raise MissingExtra("track", why="train.wandb is set", instead="leave train.wandb empty") from None
    return wandb


def _plain(config) -> dict:
    return json.loads(config.to_json_best_effort()) if hasattr(config, "to_json_best_effort") else dict(config)


def _open(config: dict, workdir, job: str, name: str):
    """The workdir's W&B run (created, or resumed by the id in DIR/wandb.json)."""
    from etils import epath

    wandb = _wandb()
    state_path = epath.Path(contract.workdir_file(workdir, STATE))
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError):
        state = {}
    train = config.get("train", {})
    project, group = str(train.get("wandb", "")), str(train.get("wandb_group", "")) or None
    run_id = state.get("id") or uuid.uuid4().hex[:12]
    if not state:
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(dict(id=run_id, project=project, group=group, job=job)))
    base = os.environ.get("WANDB_DIR") or (str(workdir) if "://" not in str(workdir)
                                          else tempfile.gettempdir())
    os.makedirs(base, exist_ok=True)
    settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_git=True,
                              save_code=False, x_save_requirements=False)
    run = wandb.init(project=project, group=group, job_type=state.get("job", job), name=name,
                     id=run_id, resume="allow", config=config, dir=base, settings=settings)
    for axis in ("train", "eval"):
        run.define_metric(f"{axis}/step")
        run.define_metric(f"{axis}/*", step_metric=f"{axis}/step")
    return run


def _scalars(prefix: str, row: dict) -> dict:
    return {f"{prefix}/{k}": v for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def wandb_writer(config, workdir):
    """row -> None logging training rows to the workdir's W&B run (None finishes it); None when
    train.wandb is empty or this is not process 0."""
    import jax

    if not str(config.train.get("wandb", "") or "") or jax.process_index() != 0:
        return None
    run = _open(_plain(config), workdir, "train", str(config.name))

    def write(row):
        if row is None:
            run.finish()
        else:
            run.log(_scalars("train", row))

    return write


def log_eval(workdir, config: dict, rows: list[dict], cooldown_from: int | None = None) -> None:
    """Evaluation rows (eval.runner) of `workdir`, whose checkpoints hold `config` (a plain dict),
    to its W&B run: the training run's, or a cooldown branch's own."""
    train = config.get("train", {})
    if not rows or not str(train.get("wandb", "") or ""):
        return
    name = str(config.get("name", "run"))
    job = "eval"
    if cooldown_from is not None:
        name, job = f"{name}-cooldown{cooldown_from}", "cooldown"
    run = _open(config, workdir, job, name)
    for r in rows:
        metrics = {k: v for k, v in r.items() if k not in ("task", "step", "eval_seconds")}
        run.log({"eval/step": int(r["step"]), **_scalars(f"eval/{r['task']}", metrics)})
    run.finish()
