"""Checkpoints: Orbax CheckpointManager under DIR/checkpoints/<step>/ behind one module.

Each training checkpoint holds the items
  params      pure dict of float32 arrays (the model's nnx.Param state)
  opt_state   optax state (absent in checkpoints written by `save_model`, e.g. by the converters,
              and in eval-only checkpoints)
  data        data-iterator state (JSON) for an exact resume (absent where opt_state is)
  metadata    JSON: step, tokens, flops (paper C = accounting.paper_flops_per_token * tokens),
              flops_exact, n_params (non-embedding), arch, run, config (the full ConfigDict)

Reading API (eval/ and the converters):
  list_steps(workdir) -> sorted complete steps
  load_metadata(workdir, step) -> dict
  load_model(workdir, step=None) -> (model, config, metadata)
  save_model(workdir, model, config, step=0, metadata=None)
A checkpoint is complete when Orbax finalised it (partial async writes stay in temporary dirs and
are ignored) and its metadata parses. Each process records the sha256 of the files it wrote in
DIR/checkpoints/<step>/checksums-p<k>.json, in the background (linscale_jax.run.checksums); a
restore verifies this process's share (restore(..., share=...)) and the processes agree on the
verdict; a checkpoint that fails verification or restore is moved to DIR/checkpoints_corrupt/<step>
with one warning line, and the previous one is used (load_model with an explicit step raises
instead).
checkpoint.state_steps names the steps whose checkpoints hold the whole training state (default
"all"); the trainer's other checkpoints are eval-only: params and metadata with `eval_only: true`,
about half the write for a small model's 2 x |params| optimizer state. A resume starts from the
newest checkpoint with the state (restore(..., resumable=True)); eval reads any.
Metadata also holds `fingerprint` (linscale_jax.run.identity) and, for training checkpoints, the
step's `loss` and `running_loss` (linscale_jax.train.divergence).
"""

from __future__ import annotations

import functools
import json
import logging
import os

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx

from linscale_jax import contract
from linscale_jax.run import checksums
from linscale_jax.run import signals

log = logging.getLogger(__name__)


class _ReadOnlyNotices(logging.Filter):
    """Drops Orbax's two warnings on every read-only CheckpointManager (which eval opens on purpose,
    once per checkpoint): they drowned eval's progress lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not ("Given directory is read only" in msg or "read_only=True, setting save_interval" in msg)


logging.getLogger("absl").addFilter(_ReadOnlyNotices())


def as_path(path) -> epath.Path:
    """A workdir as an etils.epath.Path: local paths made absolute, gs://... kept as they are."""
    p = epath.Path(path)
    return p if p.is_absolute() or "://" in str(path) else epath.Path(os.path.abspath(path))


def ckpt_dir(workdir) -> epath.Path:
    return as_path(workdir) / contract.CHECKPOINTS


def save_steps(ckpt_cfg, total_steps: int) -> set[int]:
    """Dense steps every `every_steps`, `log_spaced` log-spaced early steps in (0, every_steps),
    and the last step."""
    every = int(ckpt_cfg.every_steps)
    steps = set(range(every, total_steps + 1, every)) if every > 0 else set()
    n = int(ckpt_cfg.log_spaced)
    if n > 0 and every > 1:
        steps |= {int(round(s)) for s in np.geomspace(1, every, n + 1)[:-1]}
    steps.add(total_steps)
    return {s for s in steps if 0 < s <= total_steps}


def state_steps(ckpt_cfg, total_steps: int) -> set[int] | None:
    """The checkpoint steps that hold the whole training state: None for every one
    (checkpoint.state_steps="all"), else the listed steps and the last (the others are eval-only).
    Eval-only checkpoints need keep=0: Orbax's retention could otherwise delete the last state."""
    spec = str(ckpt_cfg.get("state_steps", "all")).strip()
    if spec == "all":
        return None
    try:
        steps = {int(x) for x in spec.split(",") if x.strip()}
    except ValueError:
        raise ValueError(f"checkpoint.state_steps={spec!r} must be 'all' or a comma list of steps, "
                         "e.g. --config.checkpoint.state_steps=1536,3072") from None
    if int(ckpt_cfg.get("keep", 0)) > 0:
        raise ValueError(f"checkpoint.state_steps={spec!r} with checkpoint.keep={ckpt_cfg.keep}: the "
                         "retention could delete the last checkpoint a resume needs; pass "
                         "--config.checkpoint.keep=0 or --config.checkpoint.state_steps=all")
    return steps | {int(total_steps)}


EVAL_ONLY = "eval_only"  # metadata key of a trainer checkpoint without the training state


def holds_state(meta: dict | None) -> bool:
    """Whether a checkpoint with this metadata can start a resume (not an eval-only one)."""
    return meta is not None and not meta.get(EVAL_ONLY, False)


def manager(workdir, ckpt_cfg=None, read_only: bool = False) -> ocp.CheckpointManager:
    keep = int(ckpt_cfg.keep) if ckpt_cfg is not None else 0
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep if keep > 0 else None,
        enable_async_checkpointing=bool(ckpt_cfg.async_save) if ckpt_cfg is not None else False,
        create=not read_only,
        cleanup_tmp_directories=not read_only,
        read_only=read_only,
    )
    mngr = ocp.CheckpointManager(ckpt_dir(workdir), options=options)
    # The step loop owns JAX's preemption sync point (one call per step, its own step numbers):
    # Orbax's finalize thread would otherwise report a save's step to it from the background.
    mngr.reached_preemption = lambda step: False
    return mngr


def _read_metadata(step_dir: epath.Path) -> dict | None:
    f = step_dir / contract.CHECKPOINT_METADATA
    try:
        return _upgraded(json.loads(f.read_text()))
    except (OSError, ValueError):
        return None


def _upgraded(meta):
    """Stored metadata with its config's model section in today's form (fields renamed since the
    checkpoint was written are translated: linscale_jax.models.config.upgrade)."""
    from linscale_jax.models.config import upgrade_config

    if isinstance(meta, dict) and "config" in meta:
        meta = {**meta, "config": upgrade_config(meta["config"])}
    return meta


def list_steps(workdir) -> list[int]:
    """Sorted steps of the complete checkpoints under workdir/checkpoints/."""
    d = ckpt_dir(workdir)
    if not d.is_dir():
        return []
    steps = []
    for p in d.iterdir():
        if p.name.isdigit() and p.is_dir() and _read_metadata(p) is not None:
            steps.append(int(p.name))
    return sorted(steps)


def resolve(workdir, step):
    """(workdir, step) from a workdir or a checkpoint dir (workdir/checkpoints/<step>: its step
    unless `step` is given)."""
    p = as_path(workdir)
    if p.name.isdigit() and p.parent.name == contract.CHECKPOINTS and not (p / contract.CHECKPOINTS).is_dir():
        return p.parent.parent, int(p.name) if step is None else step
    return p, step


def load_metadata(workdir, step: int) -> dict:
    workdir, step = resolve(workdir, step)
    meta = _read_metadata(ckpt_dir(workdir) / str(step))
    if meta is None:
        raise FileNotFoundError(
            f"no complete checkpoint at step {step} in {ckpt_dir(workdir)} "
            f"(complete steps: {list_steps(workdir)})."
        )
    return meta


def config_from_metadata(meta: dict) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(meta["config"])


def make_metadata(config, step: int, extra: dict | None = None) -> dict:
    """Step, tokens (all sequence positions), paper C, exact FLOPs, non-embedding params, config."""
    from linscale_jax.models import accounting
    from linscale_jax.run import identity
    from linscale_jax.models import ModelConfig

    cfg = ModelConfig.from_config(config.model)
    seq_len = int(config.train.seq_len)
    tokens = int(step) * int(config.train.batch_size) * seq_len
    meta = dict(
        step=int(step),
        tokens=tokens,
        flops=float(accounting.paper_flops_per_token(cfg, seq_len)) * tokens,
        flops_exact=float(accounting.flops_per_token_exact(cfg, seq_len)) * tokens,
        n_params=int(accounting.param_counts(cfg)["non_embedding"]),
        arch=cfg.arch,
        run=str(config.name),
        config=json.loads(config.to_json_best_effort()),
        fingerprint=identity.fingerprint(config)["sha256"],
    )
    meta.update(extra or {})
    return meta


def save(mngr, step: int, params, metadata: dict, opt_state=None, data_state=None) -> None:
    """Write one checkpoint (asynchronously when the manager is async)."""
    items = dict(params=ocp.args.StandardSave(params), metadata=ocp.args.JsonSave(metadata))
    if opt_state is not None:
        items["opt_state"] = ocp.args.StandardSave(opt_state)
    if data_state is not None:
        items["data"] = ocp.args.JsonSave(data_state)
    mngr.save(int(step), args=ocp.args.Composite(**items), force=True)


def restore(mngr, workdir, abstract_params, abstract_opt_state=None, step=None, shared=False,
            resumable: bool = False):
    """Restore the newest readable checkpoint (or `step`) -> dict or None when there is none.

    Keys: step, params, opt_state (None when absent), data (None when absent), metadata. With
    step=None a checkpoint that fails to restore is moved aside and the previous one is tried. A
    signal stops the command after the restore, never inside it (linscale_jax.run.signals).
    shared=True: every process restores its shards of the same arrays (the trainer); each verifies
    the checksums of its share and all agree. False: this process reads every array and verifies
    every file (eval, load_model). resumable=True (the trainer): eval-only checkpoints are passed
    over (the newest with the training state is restored).
    """
    with signals.postponed():  # a restore cut short would read as a damaged checkpoint
        return _restore(mngr, workdir, abstract_params, abstract_opt_state, step, shared, resumable)


def _restore(mngr, workdir, abstract_params, abstract_opt_state, step, shared, resumable):
    from linscale_jax.parallel import distributed

    share = (jax.process_index(), jax.process_count()) if shared else None
    steps = [step] if step is not None else list_steps(workdir)[::-1]
    if resumable and step is None:
        steps = [s for s in steps if holds_state(_read_metadata(ckpt_dir(workdir) / str(s)))]
    for s in steps:
        step_dir = ckpt_dir(workdir) / str(s)
        problem = checksums.verify(step_dir, share)
        if shared:
            problem = distributed.first_problem(problem)
        if problem:  # checksums recorded at save (linscale_jax.run.checksums)
            err = checksums.CheckpointCorruptError(
                f"checkpoint {step_dir} is corrupt ({problem}); use another step (complete: "
                f"{list_steps(workdir)}) or re-create it.")
            if step is not None:
                raise err
            if not shared or distributed.is_primary():
                checksums.quarantine(as_path(workdir), s, err)
            if shared:
                distributed.barrier(f"linscale_quarantine_{s}")
            mngr.reload()
            continue
        present = {p.name for p in step_dir.iterdir()} if step_dir.is_dir() else set()
        items = dict(params=ocp.args.StandardRestore(abstract_params),
                     metadata=ocp.args.JsonRestore())
        if abstract_opt_state is not None and "opt_state" in present:
            items["opt_state"] = ocp.args.StandardRestore(abstract_opt_state)
        if "data" in present:
            items["data"] = ocp.args.JsonRestore()
        try:
            r = mngr.restore(s, args=ocp.args.Composite(**items))
            params = r["params"]
            jax.tree.map(_check_shape, params, abstract_params)
        except Exception as e:  # noqa: BLE001 - any failure means the checkpoint is unusable
            if step is not None:
                raise RuntimeError(f"checkpoint {step_dir} could not be restored: {e}") from e
            if distributed.is_primary():  # every process failed alike; one moves the files
                checksums.quarantine(as_path(workdir), s, e)
            distributed.barrier(f"linscale_quarantine_{s}")
            mngr.reload()  # forget the moved step
            continue
        return dict(step=s, params=params, opt_state=r.get("opt_state"), data=r.get("data"),
                    metadata=_upgraded(r["metadata"]))
    return None


def _check_shape(x, ref):
    if tuple(x.shape) != tuple(ref.shape):
        raise ValueError(f"stored array of shape {x.shape} where the model has {ref.shape}")


# ---------------------------------------------------------------- model-level API (eval, convert)


@functools.lru_cache(maxsize=8)
def _model_parts(cfg, seed: int):
    """sharding.model_parts, once per (model config, seed): every checkpoint of a run shares it."""
    from linscale_jax.parallel import sharding

    return sharding.model_parts(cfg, seed)


@functools.lru_cache(maxsize=8)
def _rest_arrays(graphdef_cfg, seed: int):
    """Concrete non-parameter state of a model (computed under jit; parameter init is dead code),
    once per (model config, seed): every checkpoint of a run shares it."""
    from linscale_jax.models import build_model

    return jax.jit(lambda: nnx.split(build_model(graphdef_cfg, rngs=nnx.Rngs(seed)),
                                     nnx.Param, ...)[2])()


def _rest_state(graphdef_cfg, seed: int):
    """A fresh copy of the cached state's Variables (nnx.merge adopts them, and a model may assign
    to them, e.g. a decoding cache); the arrays themselves are immutable and shared."""
    return jax.tree.map(lambda x: x, _rest_arrays(graphdef_cfg, seed))


def target_shardings(abstract_params, devices=None):
    """The abstract params placed replicated on `devices` (default: this process's first device,
    so every process of a multi-process eval holds its own copy). Restoring into them reads a
    checkpoint written by any mesh and any number of processes (Orbax reshards the stored chunks)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if devices is None:
        devices = jax.local_devices()[:1]
    rep = NamedSharding(Mesh(np.asarray(list(devices), dtype=object), ("devices",)), PartitionSpec())
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep),
                        abstract_params)


def load_model(workdir, step: int | None = None, devices=None):
    """(model with restored params, config, metadata) of `step` (default: newest complete).

    The params land replicated on `devices` (see target_shardings: one device by default), whatever
    mesh and process count wrote the checkpoint."""
    workdir, step = resolve(workdir, step)
    if not as_path(workdir).is_dir():
        raise FileNotFoundError(f"workdir {workdir} does not exist.")
    steps = list_steps(workdir)
    if not steps:
        raise FileNotFoundError(
            f"no complete checkpoints under {ckpt_dir(workdir)}; train first "
            "(python -m linscale_jax.train ...) or convert weights (python -m linscale_jax.interop.convert).")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise FileNotFoundError(f"no complete checkpoint at step {step}; complete steps: {steps}")
    config = config_from_metadata(load_metadata(workdir, step))
    cfg, seed = _model_key(config)
    parts = _model_parts(cfg, seed)
    mngr = manager(workdir, read_only=True)
    try:
        r = restore(mngr, workdir, target_shardings(parts.abstract_params, devices), step=step)
    finally:
        mngr.close()
    model = nnx.merge(parts.graphdef, r["params"], _rest_state(cfg, seed))
    return model, config, r["metadata"]


def _model_key(config):
    """(ModelConfig, seed) of a checkpoint's config: what its model's structure and state follow."""
    from linscale_jax.models import ModelConfig

    seed = int(config.train.get("seed", 0)) if "train" in config else 0
    return ModelConfig.from_config(config.model), seed


def model_of_params(config, params, devices=None):
    """The model load_model builds for a checkpoint of `config` holding `params` (a pure dict of
    arrays, e.g. the trainer's in memory: copied to load_model's placement, target_shardings), in
    one process: the same graph, state and parameter values as the restored checkpoint's."""
    cfg, seed = _model_key(config)
    parts = _model_parts(cfg, seed)
    placed = jax.device_put(params, jax.tree.map(lambda a: a.sharding,
                                                 target_shardings(parts.abstract_params, devices)))
    return nnx.merge(parts.graphdef, placed, _rest_state(cfg, seed))


def save_model(workdir, model, config, step: int = 0, metadata: dict | None = None) -> epath.Path:
    """Write a params-only checkpoint of `model` that train (resume, --init_from) and eval accept."""
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    meta = make_metadata(config, step, extra=dict(metadata or {}))
    mngr = manager(workdir)
    try:
        save(mngr, step, params, meta)
        mngr.wait_until_finished()
    finally:
        mngr.close()
    checksums.record(ckpt_dir(workdir) / str(step), jax.process_index(), jax.process_count())
    return ckpt_dir(workdir) / str(step)


__all__ = ["as_path", "holds_state", "state_steps", "EVAL_ONLY", "target_shardings", "list_steps", "load_metadata", "load_model", "model_of_params", "save_model", "save_steps", "manager",
           "restore", "save", "make_metadata", "config_from_metadata"]
