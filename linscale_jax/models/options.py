"""Per-architecture options: a small frozen dataclass on each arch's registry entry (ArchSpec.options).

    @dataclasses.dataclass(frozen=True)
    class TNLOptions:                                     # in linscale_jax/models/tnl.py
        decay_rule: str = option("paper", choices=("paper", "alibi_layer"))
        gate: str = option("lowrank", choices=("lowrank", "linear"), shape=True)

    cfg.tnl.decay_rule                                    # a ModelConfig's options of tnl
    --config.model.tnl.decay_rule=alibi_layer             # the command line
    tnl+decay_rule=alibi_layer                            # a variant label (models.variants)

An option holds what one architecture alone reads (TNL's decay rule, gate and LRPE; HGRN2's q scale;
cosFormer2's TPE; LLaMA's key/value heads and RoPE base). Each field has a default (the paper's
block), a type (the default's: str, int, float or bool), optionally `choices`, and `shape=True`
when it changes the parameter shapes (a resume cannot change it: linscale_jax.run.identity). An
options class may define `check(self, cfg)` for conditions on the rest of the model config (e.g.
LLaMA's key/value heads divide its heads); it raises ValueError naming the field and the fix.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def option(default, *, choices: tuple | None = None, shape: bool = False, minimum=None):
    """A field of an options dataclass: its default, allowed values (choices), whether it changes
    parameter shapes (shape), and for numbers the least allowed value (minimum)."""
    return dataclasses.field(default=default, metadata=dict(choices=choices, shape=shape,
                                                            minimum=minimum))


def fields(options_class) -> tuple:
    """The dataclass fields of an options class."""
    return dataclasses.fields(options_class)


def field_kind(f) -> type:
    """The type of an option: its default's (str, int, float, bool)."""
    return type(f.default)


def parse_value(where: str, kind: type, text: str):
    """A command-line or label text typed as `kind` (bool: true / false); one-line errors."""
    if isinstance(text, kind) and not (kind is int and isinstance(text, bool)):
        return text
    text = str(text)
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{where} takes true or false, got {text!r}.")
        return text.lower() == "true"
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{where}={text!r} is not a {kind.__name__}.") from None


def coerce(arch: str, options_class, values: dict) -> Any:
    """values {field: value} over the class defaults -> an options instance; unknown fields and
    values of the wrong type are one-line errors naming `model.<arch>.<field>`."""
    known = {f.name: f for f in fields(options_class)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"model.{arch}: unknown option(s) {unknown}; {arch}'s options are "
                         f"{sorted(known)} (e.g. --config.model.{arch}.{next(iter(known))}=...).")
    typed = {}
    for name, value in values.items():
        kind = field_kind(known[name])
        where = f"model.{arch}.{name}"
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{where}={value!r} must be a {kind.__name__} "
                             f"(e.g. --config.model.{arch}.{name}={known[name].default}).")
        typed[name] = value
    return options_class(**typed)


def validate(arch: str, opts, cfg) -> None:
    """Choices and minimums of every field, then the class's own `check(cfg)` if it has one."""
    for f in fields(type(opts)):
        value, meta = getattr(opts, f.name), f.metadata
        if meta.get("choices") is not None and value not in meta["choices"]:
            raise ValueError(f"model.{arch}.{f.name}={value!r} is not supported; choose one of "
                             f"{meta['choices']} (e.g. --config.model.{arch}.{f.name}="
                             f"{meta['choices'][0]}).")
        if meta.get("minimum") is not None and value < meta["minimum"]:
            raise ValueError(f"model.{arch}.{f.name}={value!r} must be >= {meta['minimum']} "
                             f"(default {f.default}).")
    check = getattr(opts, "check", None)
    if check is not None:
        check(cfg)


def as_dict(opts) -> dict:
    return dataclasses.asdict(opts)


def shape_fields(arch: str, options_class) -> tuple[str, ...]:
    """'<arch>.<field>' of the options that change parameter shapes."""
    return tuple(f"{arch}.{f.name}" for f in fields(options_class) if f.metadata.get("shape"))
