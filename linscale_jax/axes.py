"""Logical axis names -> mesh axes: the contract between the models (which name their parameters'
and activations' dims) and the sharding of arrays over the mesh ('data', 'fsdp', 'tensor', 'seq').

Imports no model code, so the models (which read it inside shard_map) and linscale_jax.parallel.sharding
(which builds models abstractly) both sit above it.
"""

from __future__ import annotations

import math

from jax.sharding import Mesh, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor", "seq")
BATCH_AXES = ("data", "fsdp")

# logical axis name -> mesh axis (None: replicated). One mapping per name.
RULES = {
    "batch": BATCH_AXES,  # activations / batches
    "length": "seq",  # sequence positions (sequence parallelism)
    "vocab": "tensor",
    "embed": "fsdp",  # model width d
    "mlp": "tensor",  # GLU width g
    "heads": "tensor",  # h * e projections
    "kv": None,  # head dim e
    "rank": None,  # low-rank output gate r
    "layers": None,  # stacked layer axis (scan_layers)
    "norm": None,
    "gain": None,  # per-channel gains/rates laid out as a table (LRPE θ [h, e]): not a matrix
}
SHAPE_RULE = ("embed", "mlp")  # (in, out) names of un-annotated >= 2-D parameters


def axis_size(mesh: Mesh, axes) -> int:
    axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
    return math.prod(mesh.shape.get(a, 1) for a in axes)


def logical_to_spec(names, shape, mesh: Mesh, where: str = "") -> P:
    """PartitionSpec for an array of `shape` whose dims carry logical `names` (see RULES)."""
    if len(names) != len(shape):
        raise ValueError(f"{where}: {len(names)} axis names {names} for an array of shape {shape}")
    used, spec = set(), []
    for name, dim in zip(names, shape):
        if name is not None and name not in RULES:
            raise ValueError(
                f"{where}: unknown logical axis name {name!r}; known names are {sorted(RULES)} "
                "(add the name to linscale_jax.axes.RULES)."
            )
        axes = RULES.get(name) if name else None
        axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
        axes = tuple(a for a in axes if a in mesh.shape and mesh.shape[a] > 1 and a not in used)
        if not axes or dim % axis_size(mesh, axes):
            spec.append(None)
            continue
        used.update(axes)
        spec.append(axes[0] if len(axes) == 1 else axes)
    return P(*spec)
