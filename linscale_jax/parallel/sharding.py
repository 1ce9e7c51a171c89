"""Device mesh, logical-axis rules, and the shardings of parameters, optimizer state and batches.

Mesh axes are ('data', 'fsdp', 'tensor'), plus 'seq' when `mesh.seq > 1`; the shape comes from the
`mesh` config section, where -1 means "all remaining devices". Parameters carry logical axis names
in their `axes` metadata (set by linscale_jax.models); RULES maps each logical name to a mesh axis.
A parameter without names gets the documented shape rule: its last two dims are (in, out) = ('embed',
'mlp'), so the input dim is sharded on 'fsdp' and the output dim on 'tensor'; 0/1-D arrays are
replicated. A dim whose length is not divisible by its mesh axes is replicated (never padded).
Batches [b, t] are sharded on ('data', 'fsdp') along b (and 'seq' along t).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import nnx
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from linscale_jax.axes import (  # noqa: F401  (re-exported: the logical-axis contract)
    BATCH_AXES, MESH_AXES, RULES, SHAPE_RULE, axis_size, logical_to_spec)


def mesh_shape(mesh_cfg, n_devices: int) -> dict[str, int]:
    """Resolve the config's axis sizes (one may be -1) against the device count."""
    sizes = {a: int(mesh_cfg.get(a, 1)) for a in MESH_AXES}
    free = [a for a, s in sizes.items() if s == -1]
    bad = [a for a, s in sizes.items() if s == 0 or s < -1]
    if bad or len(free) > 1:
        raise ValueError(
            f"mesh: axis sizes {sizes} are invalid: each must be a positive integer and at most one "
            "may be -1 (all remaining devices). Example: --config.mesh.data=-1 --config.mesh.fsdp=1"
        )
    fixed = math.prod(s for s in sizes.values() if s != -1)
    if free:
        if n_devices % fixed:
            raise ValueError(
                f"mesh: {n_devices} devices cannot be split as {sizes} (the fixed axes multiply to "
                f"{fixed}, which does not divide {n_devices}); change the mesh.* sizes."
            )
        sizes[free[0]] = n_devices // fixed
    if math.prod(sizes.values()) != n_devices:
        raise ValueError(
            f"mesh: shape {sizes} needs {math.prod(sizes.values())} devices but {n_devices} are "
            "available; make the product of mesh.data, mesh.fsdp, mesh.tensor, mesh.seq equal the "
            "device count, or set one of them to -1."
        )
    return sizes


def make_mesh(mesh_cfg, devices=None) -> Mesh:
    """Mesh over `devices` (default: all) with axes ('data','fsdp','tensor') [+ 'seq']."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = mesh_shape(mesh_cfg, len(devices))
    names = MESH_AXES if sizes["seq"] > 1 else MESH_AXES[:3]
    shape = tuple(sizes[a] for a in names)
    try:
        arr = mesh_utils.create_device_mesh(shape, devices=devices)
    except Exception:  # non-TPU topologies, device subsets
        arr = np.asarray(devices, dtype=object).reshape(shape)
    return Mesh(arr, names)


class ModelParts(NamedTuple):
    """Abstract view of a model: graphdef, params (pure dict of ShapeDtypeStruct), logical axes."""

    graphdef: Any
    abstract_params: Any
    param_axes: Any  # pure dict of tuples of logical names (or None where a param has none)
    abstract_rest: Any  # non-parameter state (nnx.State of abstract values)


def model_parts(model_cfg, seed: int = 0) -> ModelParts:
    """Build the model abstractly (no memory) and read its parameter shapes and logical axes."""
    from linscale_jax.models import build_model

    abstract = nnx.eval_shape(lambda: build_model(model_cfg, rngs=nnx.Rngs(seed)))
    graphdef, params, rest = nnx.split(abstract, nnx.Param, ...)
    shapes, axes = {}, {}
    for path, v in _variables(params):
        shapes[path] = jax.ShapeDtypeStruct(v.shape, v.dtype)
        names = v.get_metadata().get("axes")
        axes[path] = tuple(names) if names is not None else None
    return ModelParts(graphdef, _unflatten(shapes), _unflatten(axes), rest)


def _variables(state):
    """(path tuple, nnx.Variable) pairs of an nnx.State."""
    leaves = jax.tree_util.tree_flatten_with_path(
        state, is_leaf=lambda x: isinstance(x, nnx.Variable))[0]
    for kp, v in leaves:
        yield tuple(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))) for k in kp), v


def param_specs(abstract_params, param_axes, mesh: Mesh):
    """PartitionSpec per parameter (pure dict), from its logical names or the shape rule."""
    flat_axes = dict(_flatten(param_axes))
    out = {}
    for path, x in _flatten(abstract_params):
        names = flat_axes.get(path)
        if names is None:  # the documented shape rule
            names = (None,) * (x.ndim - 2) + SHAPE_RULE if x.ndim >= 2 else (None,) * x.ndim
        out[path] = logical_to_spec(tuple(names), x.shape, mesh, where="/".join(map(str, path)))
    return _unflatten(out)


def _flatten(tree, prefix=()):
    """(path tuple, leaf) pairs of a nested dict."""
    if isinstance(tree, dict):
        for k in tree:
            yield from _flatten(tree[k], prefix + (k,))
    else:
        yield prefix, tree


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for path, v in flat.items():
        d = out
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = v
    return out


def named(mesh: Mesh, specs):
    return jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda x: isinstance(x, P))


def opt_state_specs(tx, abstract_opt_state, param_spec_tree):
    """Optimizer-state specs: every per-parameter leaf follows its parameter; the rest replicated."""
    import optax

    return optax.tree_map_params(
        tx,
        lambda _, spec: spec,
        abstract_opt_state,
        param_spec_tree,
        transform_non_params=lambda _: P(),
        is_leaf=lambda x: isinstance(x, P),
    )


def batch_spec(mesh: Mesh) -> P:
    """[b, t] batches: b on ('data', 'fsdp'), t on 'seq' when present."""
    return P(BATCH_AXES, "seq" if "seq" in mesh.shape else None)


def global_batch(batch: dict, batch_sharding: NamedSharding, keys=None) -> dict:
    """Global jax.Arrays of a global numpy batch ([b, t] per key, identical on every process).

    Each process copies only the shards its own devices hold (whatever the mesh: rows split on
    data/fsdp, columns on seq, replication over tensor), so the global array has the global shape
    and the same contents for any process count.
    """
    keys = batch.keys() if keys is None else keys
    out = {}
    for k in keys:
        x = np.asarray(batch[k])
        out[k] = jax.make_array_from_callback(x.shape, batch_sharding, lambda idx, x=x: x[idx])
    return out


def check_batch(batch_size: int, seq_len: int, grad_accum: int, mesh: Mesh) -> None:
    """Clear errors when the global batch cannot be split over the mesh and micro-batches."""
    n = axis_size(mesh, BATCH_AXES)
    if grad_accum < 1 or batch_size % grad_accum:
        raise ValueError(
            f"train.batch_size={batch_size} is not divisible by train.grad_accum={grad_accum}; "
            "choose grad_accum dividing the batch."
        )
    if (batch_size // grad_accum) % n:
        raise ValueError(
            f"train.batch_size={batch_size} (micro-batch {batch_size // grad_accum} with "
            f"grad_accum={grad_accum}) is not divisible by the data axes data*fsdp={n} of mesh "
            f"{dict(mesh.shape)}; use a batch size that is a multiple of {n * grad_accum}."
        )
    if "seq" in mesh.shape and seq_len % mesh.shape["seq"]:
        raise ValueError(
            f"train.seq_len={seq_len} is not divisible by mesh.seq={mesh.shape['seq']}."
        )
