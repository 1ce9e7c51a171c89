"""Variant labels' changes: `<arch>+<field>=<value>` as a change of the model section.

    variant_change("cosformer2", "tpe", "none")    -> {"cosformer2": {"tpe": "none"}}
    variant_change("tnl", "short_conv", "4")       -> {"short_conv": 4}
    variant_change("tnl", "tnl.gate", "linear")    -> {"tnl": {"gate": "linear"}}
    merge(a, b)                                    -> a and b's changes together (b wins)

`field` is a common model field (ModelConfig's, except arch and size), an option of the arch
(`tpe` for cosformer2, or spelled `<arch>.<option>`), or an option's earlier flat name (`tnl_gate`:
models.config.LEGACY). The value is typed like the field's default (bool: true / false); an
option's choices are checked here, everything else when the model config is built.
"""

from __future__ import annotations

import dataclasses

from linscale_jax.models import options as opt
from linscale_jax.models import registry
from linscale_jax.models.config import LEGACY, ModelConfig

_NOT_VARIED = ("arch", "size", "options")


def variant_change(arch: str, field: str, value) -> dict:
    """The partial model section of one `<field>=<value>` of a variant label of `arch`."""
    spec = registry.get(arch)  # an unknown arch is an error listing the registered ones
    where = f"variant {arch}+{field}={value}"
    if field in LEGACY:
        owner, field = LEGACY[field]
        field = f"{owner}.{field}"
    owner, dot, name = field.rpartition(".")
    if dot:
        if owner != arch:
            raise ValueError(f"{where}: {owner!r} options do not apply to {arch}; name {arch}'s own "
                             f"options or a common field (e.g. cosformer2+tpe=none).")
        field = name
    common = {f.name: f for f in dataclasses.fields(ModelConfig) if f.name not in _NOT_VARIED}
    if field in common and not dot:
        return {field: opt.parse_value(where, type(common[field].default), value)}
    own = {f.name: f for f in opt.fields(spec.options)} if spec.options is not None else {}
    if field not in own:
        raise ValueError(
            f"{where}: {field!r} is neither a common model field nor an option of {arch}; use "
            f"<field>=<value> with a field of ModelConfig other than arch and size, or one of "
            f"{arch}'s options {sorted(own)} (e.g. cosformer2+tpe=none, tnl+short_conv=4).")
    typed = opt.parse_value(where, opt.field_kind(own[field]), value)
    choices = own[field].metadata.get("choices")
    if choices is not None and typed not in choices:
        raise ValueError(f"{where}: {arch}.{field} takes one of {choices}.")
    return {arch: {field: typed}}


def merge(a: dict, b: dict) -> dict:
    """Two partial model sections as one (an arch's options merged field by field; b wins)."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out
