"""A run's identity: the config fields a workdir's checkpoints belong to, checked on every resume.

    fp = fingerprint(config)                      # {"sha256": ..., "fields": {...}} -> metadata
    diff = check_resume(stored_config, config)    # raises RunIdentityError on a refused change

Every checkpoint's metadata carries `fingerprint`. On resume the trainer compares the config of the
newest checkpoint with the command's config. Fields that may change on resume (RESUMABLE below):

  train.steps                                   extend or shorten a run
  train.log_every, train.eval_every, train.eval_batches, train.peak_flops, train.profile_steps,
  train.wandb, train.wandb_group                logging / evaluation cadence, MFU reference, profiling,
                                                Weights & Biases project and group
  checkpoint.*                                  checkpoint schedule, retention, async writes
  mesh.*                                        device mesh (elastic resume on other slices)
  name                                          the run's label

Any other change (model, data, batch, sequence length, seed, optimizer, ...) is refused with a
one-line message listing the differing fields, before anything in the workdir is touched. Passing
`--allow_config_change` accepts it; the change is recorded in the metadata of every later
checkpoint (`config_changes`). Fields that fix parameter shapes cannot change even then: the stored
parameters would not fit (start a new run with --init_from instead).
"""

from __future__ import annotations

import hashlib
import json
from linscale_jax.errors import Refusal

RESUMABLE = ("name", "train.steps", "train.log_every", "train.eval_every", "train.eval_batches",
             "train.peak_flops", "train.profile_steps", "train.wandb", "train.wandb_group",
             "checkpoint.", "mesh.")


class RunIdentityError(Refusal, ValueError):
    """A resume with a config that changes the run's identity (nothing in the workdir was touched)."""


def _plain(config) -> dict:
    if hasattr(config, "to_json_best_effort"):
        return json.loads(config.to_json_best_effort())
    return json.loads(json.dumps(config, default=str))


def flatten(config) -> dict:
    """{'model.d_model': 64, 'train.steps': 400, ...} of a ConfigDict or a plain (stored) dict."""
    out = {}

    def walk(prefix, x):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(f"{prefix}{k}.", v)
        else:
            out[prefix[:-1]] = x

    walk("", _plain(config))
    return out


def resumable(field: str) -> bool:
    return any(field == r or (r.endswith(".") and field.startswith(r)) for r in RESUMABLE)


def fingerprint(config) -> dict:
    """sha256 over the identity fields (all but RESUMABLE) and those fields themselves."""
    fields = {k: v for k, v in sorted(flatten(config).items()) if not resumable(k)}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return dict(sha256=digest, fields=fields)


def diff(stored_config, config) -> dict:
    """{field: (stored, new)} of the identity fields that differ. A field present on one side only
    (added or removed by a code change since the checkpoint) counts only when it holds a value
    other than the default of linscale_jax.config.base_config."""
    from linscale_jax.config import base_config

    a, b = fingerprint(stored_config)["fields"], fingerprint(config)["fields"]
    defaults = flatten(base_config())
    out = {}
    for k in sorted(set(a) | set(b)):
        if k in a and k in b:
            if a[k] != b[k]:
                out[k] = (a[k], b[k])
        elif (a if k in a else b)[k] != defaults.get(k, (a if k in a else b)[k]):
            out[k] = (a.get(k, "<absent>"), b.get(k, "<absent>"))
    return out


def _fmt(d: dict, limit: int = 8) -> str:
    items = [f"{k} {v[0]!r} -> {v[1]!r}" for k, v in d.items()]
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def check_resume(stored_config, config, workdir, step: int, allow_change: bool = False) -> dict:
    """Refuse (RunIdentityError) a resume whose config changes the run; returns the accepted diff."""
    d = diff(stored_config, config)
    if not d:
        return {}
    from linscale_jax.models.config import shape_fields

    shape = {k: v for k, v in d.items() if k in shape_fields()}
    if shape:
        raise RunIdentityError(
            f"{workdir} holds a different model (checkpoint {step}): {_fmt(shape)}; use a new "
            f"--workdir (optionally --init_from={workdir}) or the run's own config to resume it.")
    if not allow_change:
        raise RunIdentityError(
            f"config differs from the run in {workdir} (checkpoint {step}): {_fmt(d)}; resume with "
            "the run's config, use a new --workdir, or pass --allow_config_change to continue "
            "this run with the change recorded (only train.steps, log/eval cadence, checkpoint.* "
            "and mesh.* may change freely).")
    return d


def record(stored_meta: dict | None, accepted: dict, step: int) -> dict:
    """Metadata entries of later checkpoints: the fingerprint history with this accepted change."""
    changes = list((stored_meta or {}).get("config_changes", []))
    if accepted:
        changes.append(dict(at_step=int(step),
                            fields={k: [v[0], v[1]] for k, v in accepted.items()}))
    return dict(config_changes=changes) if changes else {}
