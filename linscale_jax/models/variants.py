"""Variant labels' changes: `<arch>+<field>=<value>` as a change of the model section.

    variant_change("cosformer2", "tpe", "none")    -> {"cosformer2": {"tpe": "none"}}
    variant_change("tnl", "short_conv", "4")       -> {"short_conv": 4}
    variant_change("tnl", "tnl.gate", "linear")    -> {"tnl": {"gate": "linear"}}
    merge(a, b)                                    -> a and b's changes together (b wins)

`field` is a common model field (ModelConfig's, except arch and size), an option of the arch
(`tpe` for cosformer2, or spelled `<arch>.<option>`), an option's earlier flat name (`tnl_gate`:
models.config.LEGACY), or `hybrid`, a hybrid stack's ratio (`hybrid_layers`):

    variant_change("tnl", "hybrid", "3:1")         -> {"layers": "tnl*3,llama"}
    variant_change("tnl", "hybrid", "3:1:first")   -> {"layers": "llama,tnl*3"}
    variant_change("gdn", "hybrid", "6:1:hgrn2")   -> {"layers": "gdn*6,hgrn2"}

The value is typed like the field's default (bool: true / false); an option's choices are checked
here, everything else when the model config is built.
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
    if field == "hybrid":
        return {"layers": hybrid_layers(arch, str(value))}
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


def softmax_arch() -> str:
    """The registry's first softmax-attention arch (llama): a hybrid's default partner."""
    return next(a for a in registry.ARCHS if registry.get(a).softmax_block)


def hybrid_layers(arch: str, ratio: str) -> str:
    """A hybrid ratio 'N:M[:<partner>][:first|last]' of `arch` -> the layer pattern (model.layers):
    N layers of `arch`, then M of the partner (default softmax attention: the registry's first
    softmax block, llama), repeated to the depth; `first` puts the partner's layers first in each
    group (default `last`: the MiniMax-01, Olmo Hybrid and Kimi Linear layout)."""
    where = f"variant {arch}+hybrid={ratio}"
    parts = str(ratio).split(":")
    try:
        n, m = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        n = m = 0
    if n < 1 or m < 1:
        raise ValueError(f"{where}: the ratio must be N:M with N, M >= 1 layers, optionally "
                         f"followed by :<arch> and :first (e.g. {arch}+hybrid=3:1).")
    partner, first = softmax_arch(), False
    for extra in parts[2:]:
        if extra in ("first", "last"):
            first = extra == "first"
        else:
            registry.get(extra)  # an unknown arch is an error listing the registered ones
            partner = extra
    if partner == arch:
        raise ValueError(f"{where}: a hybrid needs two architectures; name a partner other than "
                         f"{arch} (e.g. {arch}+hybrid={n}:{m}:{softmax_arch()}).")
    groups = [f"{arch}*{n}" if n > 1 else arch, f"{partner}*{m}" if m > 1 else partner]
    return ",".join(groups[::-1] if first else groups)


def merge(a: dict, b: dict) -> dict:
    """Two partial model sections as one (an arch's options merged field by field; b wins)."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out
