"""Validation loss, perplexity and bits per byte on the held-out split of the run's own data task.

    m = validation_loss(model, config, vocab, num_batches=None)
      -> {"val_loss", "val_ppl", "val_bpb", "val_tokens", "val_bytes"}
    m = metrics(dispatch(model, config, vocab, num_batches))   # the same, without the memo
    m = averaged_validation_loss(model, config, vocab, workdir, step)   # + "avg_steps", "avg_from"

Batches come from data.eval_batches(config, split="validation") — the run's task, tokenisation,
sequence length and packing — so val_loss is the quantity the trainer logs. With several processes
(python -m linscale_jax.eval launched like the trainer) process i scores batches i, i+n, ... on its own copy of
the model and the sums are added over processes, so every process returns the same figures. The loss is the
weight-masked mean next-token cross-entropy in nats; ppl = exp(loss); bits per byte =
sum(nll) / (ln 2 * bytes), where bytes are the UTF-8 bytes of the scored target text (decoded per
packed segment), which makes runs with different vocabularies comparable.
"""

from __future__ import annotations

import functools
import glob
import json
import math
import os
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def _nll_sum(graphdef, params, inputs, targets, segment_ids, weights):
    """[b, t] arrays -> (sum of weighted nll, sum of weights), float32 scalars."""
    logits = nnx.merge(graphdef, params)(inputs, segment_ids=segment_ids).astype(jnp.float32)
    logz = jax.nn.logsumexp(logits, axis=-1)
    tgt = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.sum((logz - tgt) * weights), jnp.sum(weights)


@functools.lru_cache(maxsize=16)
def nll_fn(graphdef):
    """One jitted loss function per model structure (the checkpoints of a run share it)."""
    return jax.jit(partial(_nll_sum, graphdef))


def target_bytes(batch, vocab) -> int:
    """UTF-8 bytes of the scored targets of a batch, decoded segment by segment."""
    n = 0
    tg, seg, w = batch["targets"], batch["segment_ids"], batch["weights"]
    for r in range(tg.shape[0]):
        for s in np.unique(seg[r][w[r] > 0]):
            ids = tg[r][(seg[r] == s) & (w[r] > 0)]
            n += len(vocab.decode([int(i) for i in ids]).encode("utf-8"))
    return n


def _data_key(config, n: int) -> str:
    """What the validation batches depend on: the data section, batch size, sequence length, n, this
    process's share, and the modification times of the local files the data section names."""
    stamps = []
    for v in config.data.values():
        for part in str(v).split(","):
            for path in sorted(glob.glob(part)) if part.strip() else ():
                st = os.stat(path)
                stamps.append((path, st.st_mtime_ns, st.st_size))
    return json.dumps([config.data.to_json(), int(config.train.batch_size), int(config.train.seq_len),
                       n, jax.process_index(), jax.process_count(), stamps])


_VAL_SETS: dict = {}  # _data_key -> (host batches, bytes), the few newest


def _validation_set(key: str, config, vocab, n: int) -> tuple[list[tuple], int]:
    """This process's validation batches as host arrays (inputs, targets, segment_ids, weights: put
    on the device by each call of the loss program, so that they hold no device arrays between
    checkpoints: the trainer's memory row walks the live arrays at every log step), and the UTF-8
    bytes of their scored targets. Cached by `key` (_data_key): the checkpoints of a run share one
    validation set, so it is read, packed and measured once per process."""
    if key not in _VAL_SETS:
        _VAL_SETS[key] = _read_validation_set(config, vocab, n)
        for old in list(_VAL_SETS)[:-4]:
            del _VAL_SETS[old]
    return _VAL_SETS[key]


def _read_validation_set(config, vocab, n: int) -> tuple[list[tuple], int]:
    from linscale_jax import data

    batches = data.eval_batches(config, split="validation", num_batches=n)
    if not batches:
        raise ValueError("data.eval_batches returned no validation batches; check config.data "
                         "(val_fraction > 0 and a corpus with enough documents)")
    mine = batches[jax.process_index()::jax.process_count()]
    arrays = [tuple(np.asarray(b[k]) for k in ("inputs", "targets", "segment_ids", "weights")) for b in mine]
    return arrays, sum(target_bytes(b, vocab) for b in mine)


_LAST: list = []  # [(data key, graphdef, state leaves, metrics)] of the last model scored


class Scoring(NamedTuple):
    """A model's validation sums dispatched on the devices, not yet read (`dispatch`, `metrics`)."""

    sums: list  # [(nll sum, weight sum)] per batch: float32 device scalars
    nbytes: int  # the UTF-8 bytes of the scored targets


def dispatch(model, config, vocab, num_batches: int | None = None) -> Scoring:
    """The loss program of `model` on the validation batches, dispatched back to back and not
    waited for: validation_loss = metrics(dispatch(...)) without its memo of the last model scored
    (eval.checkpoint_scores scores the trainer's parameters this way: the next step donates them)."""
    n = int(num_batches or config.train.get("eval_batches", 4) or 4)
    graphdef, params = nnx.split(model)
    arrays, nbytes = _validation_set(_data_key(config, n), config, vocab, n)
    step = nll_fn(graphdef)
    return Scoring([step(params, *b) for b in arrays], nbytes)


def metrics(scoring: Scoring) -> dict:
    """The figures of a dispatched scoring (read once: the one device->host transfer)."""
    sums, nbytes = scoring.sums, scoring.nbytes
    nll = sum(float(s) for s, _ in sums)
    tokens = sum(float(w) for _, w in sums)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        sums = multihost_utils.process_allgather(np.asarray([nll, tokens, nbytes], np.float64))
        nll, tokens, nbytes = (float(x) for x in np.sum(sums, axis=0))
        nbytes = int(nbytes)
    if tokens == 0:
        raise ValueError("the validation batches contain no scored tokens (all weights are 0)")
    loss = nll / tokens
    if not math.isfinite(loss):
        raise FloatingPointError(f"validation loss is {loss}; the checkpoint has non-finite weights")
    return {"val_loss": loss, "val_ppl": math.exp(loss), "val_bpb": nll / (math.log(2) * max(nbytes, 1)),
            "val_tokens": int(tokens), "val_bytes": nbytes}


def validation_loss(model, config, vocab, num_batches: int | None = None) -> dict:
    n = int(num_batches or config.train.get("eval_batches", 4) or 4)
    key = _data_key(config, n)
    graphdef, params = nnx.split(model)
    leaves = jax.tree.leaves(params)
    if _LAST and _LAST[0][:2] == (key, graphdef) and len(_LAST[0][2]) == len(leaves) \
            and all(a is b for a, b in zip(_LAST[0][2], leaves)):
        return dict(_LAST[0][3])  # the same (immutable) arrays on the same batches: scored already
    out = metrics(dispatch(model, config, vocab, n))
    _LAST[:] = [(key, graphdef, leaves, out)]
    return dict(out)


AVG_FRACTION = 0.25  # val_loss_avg: average the checkpoints of the last quarter of the steps so far
_PARAMS_CACHE: dict = {}  # (workdir, step) -> parameter state, the few newest per workdir


def _params_of(workdir: str, step: int, model=None):
    """The parameter state of checkpoint `step` (cached; `model` is that step's model if loaded)."""
    from linscale_jax.run import checkpoint as ckpt

    key = (str(workdir), int(step), (ckpt.ckpt_dir(workdir) / str(step)).stat().mtime)
    if key not in _PARAMS_CACHE:
        m = model if model is not None else ckpt.load_model(workdir, step)[0]
        _PARAMS_CACHE[key] = nnx.state(m, nnx.Param)
        mine = sorted(k for k in _PARAMS_CACHE if k[0] == key[0])
        for old in mine[:-16]:
            del _PARAMS_CACHE[old]
    return _PARAMS_CACHE[key]


@jax.jit
def _mean(states):
    """The element-wise mean of a list of parameter states (one compiled program per count)."""
    return jax.tree.map(lambda *xs: sum(xs) / len(xs), *states)


def window_steps(steps, step: int, fraction: float = AVG_FRACTION) -> list[int]:
    """The checkpoint steps in [step·(1 − fraction), step] (always including `step`)."""
    if not 0 <= fraction < 1:
        raise ValueError(f"the averaging window fraction must be in [0, 1), got {fraction}")
    return [s for s in steps if step * (1 - fraction) <= s <= step] or [step]


def averaged_model(model, workdir: str, step: int, fraction: float = AVG_FRACTION):
    """A copy of `model` (the checkpoint of `step`) whose weights are the mean of the weights of the
    run's checkpoints in the last `fraction` of the steps so far (checkpoint averaging, the offline
    form of an EMA of the weights whose horizon grows with the step; Sanyal et al. 2023 'LAWA');
    `model` itself when no other checkpoint is in that window."""
    from linscale_jax.run import checkpoint as ckpt

    use = window_steps(ckpt.list_steps(workdir), step, fraction)
    if use == [step]:  # nothing else in the window (early checkpoints): the model itself
        return model, use
    states = [_params_of(workdir, s, model if s == step else None) for s in use]
    mean = _mean(states)
    graphdef, _, rest = nnx.split(model, nnx.Param, ...)
    return nnx.merge(graphdef, mean, rest), use


def averaged_validation_loss(model, config, vocab, workdir: str, step: int, num_batches: int | None = None,
                             fraction: float = AVG_FRACTION) -> dict:
    """`validation_loss` of the checkpoint-averaged weights (see `averaged_model`), plus the steps
    averaged ("avg_steps")."""
    avg, use = averaged_model(model, workdir, step, fraction)
    return {**validation_loss(avg, config, vocab, num_batches), "avg_steps": len(use), "avg_from": use[0]}
