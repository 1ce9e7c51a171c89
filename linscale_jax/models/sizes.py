"""Model shapes: the paper's six sizes (notes §3), the 1B aspect-ratio variants, and a CPU ladder.

    paper_model(arch, size)   -> dict for config.model     (size: 70m 160m 410m 1b 3b 7b, or an
                                 aspect-ratio variant "1b-d1792l24" / "1b-d2048l18" / "1b-d3072l8")
    ladder_model(arch, name)  -> dict for config.model     (name: a key of LADDER, d32 ... d512)
    parse_name("tnl-410m")    -> ("tnl", "410m")
    Variant.parse("cosformer2+tpe=none")   -> an arch label parsed once (arch, changes)

Paper rule: h = d/128, g = 256·ceil(int(8d/3)/256), vocab 100,280, context 8192; 410M has 25 layers
for tnl and cosformer2 (26 otherwise; an architecture's registry entry sets such overrides,
ArchSpec.paper_layers). Aspect-ratio variants keep h = d/128 and the g rule.
Ladder rule (CPU miniature studies; why: docs/models.md, "The CPU ladder"): head dim
LADDER_HEAD_DIM at every size (h = d/16), g = 8·ceil(int(8d/3)/8), byte vocabulary 259 padded to
264, context 2048, (l, d) from LADDER.
"""

from __future__ import annotations

import dataclasses
import math

from linscale_jax.models import registry
from linscale_jax.models.registry import ARCHS
from linscale_jax.models.variants import merge, variant_change

PAPER_VOCAB = 100_280
PAPER_CONTEXT = 8192
PAPER_SIZES = {  # size: (l, d)
    "70m": (6, 512),
    "160m": (12, 768),
    "410m": (26, 1024),
    "1b": (32, 1536),
    "3b": (35, 2560),
    "7b": (32, 4096),
}
ASPECT_VARIANTS = {  # 1B aspect-ratio ablation d/l ∈ {1536/32 (= "1b"), 1792/24, 2048/18, 3072/8}
    "1b-d1792l24": (24, 1792),
    "1b-d2048l18": (18, 2048),
    "1b-d3072l8": (8, 3072),
}
LADDER_VOCAB = 264
LADDER_CONTEXT = 2048
LADDER_HEAD_DIM = 16
LADDER_FFN_MULTIPLE = 8
LADDER = {"d16l2": (2, 16), "d16": (4, 16), "d32l2": (2, 32), "d32": (4, 32), "d48": (4, 48),
          "d48l2": (2, 48), "d64l2": (2, 64), "d80l2": (2, 80), "d96l2": (2, 96), "d128l2": (2, 128),
          "d160l2": (2, 160), "d192l2": (2, 192),
          "d32l3": (3, 32), "d48l3": (3, 48), "d64l3": (3, 64), "d80l3": (3, 80), "d80l5": (5, 80),
          "d64": (4, 64), "d80": (4, 80), "d96": (4, 96),
          "d128": (4, 128), "d192": (4, 192), "d256": (6, 256), "d384": (6, 384), "d512": (8, 512)}


def paper_ffn_dim(d: int, multiple: int = 256) -> int:
    """g = multiple·ceil(int(8d/3)/multiple)."""
    return multiple * math.ceil(int(8 * d / 3) / multiple)


def parse_name(name: str) -> tuple[str, str]:
    """'<arch>-<size>' -> (arch, size); unknown arch is an error listing ARCHS. The arch part may be
    a variant label '<arch>+<field>=<value>[+...]' (split_variant), returned whole."""
    arch, sep, size = str(name).partition("-")
    if not sep or Variant.parse(arch).arch not in ARCHS:
        raise ValueError(
            f"config name {name!r} must be '<arch>-<size>' with arch one of {ARCHS} "
            "(e.g. tnl-410m, llama-d128, or a variant such as cosformer2+tpe=none-d64)."
        )
    return arch, size


@dataclasses.dataclass(frozen=True)
class Variant:
    """An arch label parsed once: 'cosformer2+tpe=none' -> Variant('cosformer2', (('tpe', 'none'),)).

        v = Variant.parse("tnl+short_conv=4")
        v.arch, v.text, v.is_variant, str(v)   # 'tnl', 'short_conv=4', True, 'tnl+short_conv=4'
        v.model_changes()                      # {'short_conv': 4}: the model section's change

    A label is `<arch>` or `<arch>+<field>=<value>[+...]`; parsing checks the form only, so a
    table's labels read without the registry; model_changes() types each value (and checks the arch
    and the field) through models.variants.variant_change."""

    arch: str
    changes: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, label) -> "Variant":
        arch, *parts = str(label).split("+")
        changes = []
        for change in parts:
            field, sep, text = change.partition("=")
            if not sep or not field or not arch:
                raise ValueError(f"variant {label!r}: {change!r} must be <field>=<value>, a model field "
                                 "or an option of the arch (e.g. cosformer2+tpe=none).")
            changes.append((field, text))
        return cls(arch, tuple(changes))

    @property
    def is_variant(self) -> bool:
        return bool(self.changes)

    @property
    def text(self) -> str:
        """'short_conv=4' ('' for the arch as it is registered)."""
        return "+".join(f"{f}={v}" for f, v in self.changes)

    def __str__(self) -> str:
        return "+".join([self.arch, *(f"{f}={v}" for f, v in self.changes)])

    def model_changes(self) -> dict:
        """The partial model section (typed; the arch and each field checked)."""
        from linscale_jax.models.variants import merge, variant_change

        registry.get(self.arch)  # an unknown arch is an error listing the registered ones
        out = {}
        for field, text in self.changes:
            out = merge(out, variant_change(self.arch, field, text))
        return out


def split_variant(label: str) -> tuple[str, dict]:
    """'cosformer2+tpe=none+norm_eps=1e-5' -> ('cosformer2', {'cosformer2': {'tpe': 'none'},
    'norm_eps': 1e-05}): an architecture and its model-section changes (Variant)."""
    v = Variant.parse(label)
    return v.arch, v.model_changes()


def paper_model(arch: str, size: str) -> dict:
    """arch: a registered name or a variant label (split_variant), whose changes win over the
    size's shape (e.g. n_heads: the state-size axis)."""
    arch, changes = split_variant(arch)
    spec = registry.get(arch)
    if size in PAPER_SIZES:
        l, d = PAPER_SIZES[size]
        l = spec.paper_layers.get(size, l)
    elif size in ASPECT_VARIANTS:
        l, d = ASPECT_VARIANTS[size]
    else:
        raise ValueError(
            f"unknown paper size {size!r}; choose one of {list(PAPER_SIZES) + list(ASPECT_VARIANTS)}."
        )
    return merge(dict(arch=arch, size=size, n_layers=l, d_model=d, n_heads=d // 128,
                      ffn_dim=paper_ffn_dim(d), vocab_size=PAPER_VOCAB, max_seq_len=PAPER_CONTEXT),
                 changes)


def ladder_model(arch: str, name: str) -> dict:
    """arch: a registered name or a variant label (split_variant), whose changes win over the
    size's shape (e.g. n_heads: the state-size axis)."""
    arch, changes = split_variant(arch)
    if name not in LADDER:
        raise ValueError(f"unknown ladder size {name!r}; choose one of {list(LADDER)}.")
    l, d = LADDER[name]
    return merge(dict(arch=arch, size=name, n_layers=l, d_model=d, n_heads=d // LADDER_HEAD_DIM,
                      ffn_dim=paper_ffn_dim(d, LADDER_FFN_MULTIPLE), vocab_size=LADDER_VOCAB,
                      max_seq_len=LADDER_CONTEXT), changes)


def apply_model(section, values: dict):
    """Write `values` into a config.model ConfigDict section: plain field assignment, and an
    arch's options ({'tnl': {'gate': 'linear'}}) field by field into its sub-section."""
    for key, value in values.items():
        if isinstance(value, dict) and key in section and hasattr(section[key], "items"):
            apply_model(section[key], value)
        else:
            setattr(section, key, value)
    return section
