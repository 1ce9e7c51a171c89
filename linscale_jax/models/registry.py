"""The architecture registry: each architecture's module registers one ArchSpec, and the rest of
the project (build_model, accounting, sizes, describe, config validation) looks it up by name.

    from linscale_jax.models import registry
    registry.register(registry.ArchSpec(name="mylin", mixer=MyMixer, ...))   # in models/mylin.py
    registry.get("mylin").mixer                                              # the token mixer
    registry.ARCHS                                                           # live tuple-like view
    registry.linear_archs()                                                  # softmax_block=False

Legend: l layers, d width, h heads, e = d/h head dim, n sequence length, c chunk length of the
chunked linear attention (min(C, n)). The shared terms live in linscale_jax.models.accounting:
Table 1's N = 12·l·d² + `paper_params_extra`, C/D = 72·l·d²·(1 + `paper_flops_x`); the exact
forward FLOPs per token = l·(2·4d² + 2·3dg + `layer_flops`) + 2dv + `once_flops` (see its doc).

Importing `linscale_jax.models` imports every module of the package whose source calls
`registry.register(` (`discover`), so a new architecture is one module in linscale_jax/models/ that
defines its mixer and registers it; nothing else lists the modules. ARCHS gives the paper's four
first, in the paper's order (PAPER_ORDER: llama, tnl, hgrn2, cosformer2), then the others in the
order they registered.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
from collections.abc import Iterable, Sequence
from typing import Any, Callable

PAPER_ORDER = ("llama", "tnl", "hgrn2", "cosformer2")  # Table 1's order: the baseline, then TNL, HGRN2, cosFormer2


def _no_flops(cfg, seq_len: int, chunk: int) -> float:
    return 0


def _no_extras(cfg) -> dict:
    return {}


def cache_floats(cfg, seq_len: int) -> int:
    """Floats of one layer's decoding state for one sequence of seq_len tokens, read from the
    mixer's init_cache (abstractly: nothing is allocated)."""
    import jax
    from flax import nnx

    from linscale_jax.models import build_model

    def cache():
        model = build_model(cfg.replace(scan_layers=False, n_layers=1), rngs=nnx.Rngs(0))
        return model.layers[0].mixer.init_cache(1, seq_len)

    return int(sum(x.size for x in jax.tree.leaves(jax.eval_shape(cache))))


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    """One architecture.

    name               config name (model.arch), e.g. "tnl"
    mixer              token-mixer class: mixer(cfg, keys=KeyGen) with the Decoder mixer interface
    paper_params_extra (l, d, h) -> int: Table-1 N beyond 12·l·d²
    paper_flops_x      (d, h, n) -> float: x of Table-1 C/D = 72·l·d²·(1 + x)
    layer_flops        (cfg, seq_len, chunk) -> exact forward FLOPs per token and layer beyond the
                       shared projections 2·4d² and GLU 2·3dg (the mixer, gates, GQA corrections)
    once_flops         (cfg, seq_len, chunk) -> exact forward FLOPs per token outside the layers
                       beyond the LM head 2dv (e.g. cosFormer2's TPE); default 0
    model              Decoder subclass (None: the plain Decoder, which builds `mixer`)
    paper_layers       {paper size: l} overriding the size table's layer count (TNL's 410M: 25)
    softmax_block      the LLaMA block: softmax attention decoding from a KV cache of max_len
                       tokens, learnable RMSNorm scales and a SwiGLU channel mixer (False: the
                       linear models' O(1) recurrent state, SimpleRMSNorm and identity-GLU, notes §2)
    describe_extras    cfg -> extra columns for `describe` (TNL: decay_per_layer, HGRN2:
                       lower_bound_per_layer)
    state_floats       (cfg, seq_len) -> floats of one layer's decoding state for one sequence:
                       the recurrent state h·k·e of a linear mixer (k its key width), a softmax
                       block's KV cache 2·kv_heads·e·seq_len (default: counted from the mixer's
                       init_cache, `cache_floats`)
    options            the arch's own options: a frozen dataclass of fields with defaults
                       (linscale_jax.models.options.option), read as cfg.<name>.<field> and set as
                       --config.model.<name>.<field>=...; None when the arch has none
    """

    name: str
    mixer: type
    paper_params_extra: Callable[[int, int, int], int]
    paper_flops_x: Callable[[int, int, int], float]
    layer_flops: Callable[[Any, int, int], float]
    once_flops: Callable[[Any, int, int], float] = _no_flops
    model: type | None = None
    paper_layers: dict = dataclasses.field(default_factory=dict)
    softmax_block: bool = False
    describe_extras: Callable[[Any], dict] = _no_extras
    state_floats: Callable[[Any, int], int] = cache_floats
    options: type | None = None


_REGISTRY: dict[str, ArchSpec] = {}


def register(spec: ArchSpec, *, replace: bool = False) -> ArchSpec:
    """Add `spec` under spec.name (registering the same name twice is an error unless replace)."""
    if not isinstance(spec, ArchSpec):
        raise TypeError(f"register takes an ArchSpec, got {type(spec).__name__}.")
    if not spec.name or "-" in spec.name:
        raise ValueError(f"architecture name {spec.name!r} must be non-empty without '-' "
                         "(config names are '<arch>-<size>').")
    if spec.options is not None:
        _check_options(spec)
    if spec.name in _REGISTRY and not replace and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"architecture {spec.name!r} is already registered; pick another name "
                         "or pass replace=True.")
    _REGISTRY[spec.name] = spec
    return spec


def _check_options(spec: ArchSpec) -> None:
    """An options class is a frozen dataclass whose fields have defaults (the paper's block). Its
    field names must differ from the common model fields' (checked by models.config, which a
    variant label `<arch>+<field>=<value>` resolves against both)."""
    cls = spec.options
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
        raise TypeError(f"{spec.name}: ArchSpec.options must be a frozen dataclass, got {cls!r}.")
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING:
            raise TypeError(f"{spec.name}: option {f.name!r} needs a default (the paper's block).")


def unregister(name: str) -> None:
    """Remove a registered architecture (tests that register a temporary one)."""
    _REGISTRY.pop(name, None)


def get(name: str) -> ArchSpec:
    """The ArchSpec registered as `name`; an unknown name is an error listing the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; choose one of {_ordered()} "
                         "(a new one registers with linscale_jax.models.registry.register).") from None


def discover(package: str, path: Iterable[str]) -> list[str]:
    """Import each module `package.<name>` found on `path` (a package's __path__) whose source
    registers an architecture (calls `registry.register(`); modules starting with "_" are skipped.
    The paper's four (modules named as in PAPER_ORDER) are imported first, in that order, then the
    others by name, so registration order agrees with ARCHS. Returns the imported module names."""
    rank = {name: i for i, name in enumerate(PAPER_ORDER)}
    found = []
    modules = sorted(pkgutil.iter_modules(list(path)), key=lambda m: (rank.get(m.name, len(rank)), m.name))
    for info in modules:
        if info.ispkg or info.name.startswith("_"):
            continue
        name = f"{package}.{info.name}"
        if name == __name__:
            continue
        spec = importlib.util.find_spec(name)
        source = spec.loader.get_source(name) if spec and spec.loader else None
        if source and "registry.register(" in source:
            importlib.import_module(name)
            found.append(name)
    return found


def _ordered() -> tuple[str, ...]:
    paper = [n for n in PAPER_ORDER if n in _REGISTRY]
    return tuple(paper) + tuple(n for n in _REGISTRY if n not in PAPER_ORDER)


def linear_archs() -> tuple[str, ...]:
    """The registered architectures without the softmax block (softmax_block=False), in
    ARCHS order: the ones the study judges against the baseline (contract.BASELINE_ARCH)."""
    return tuple(n for n in _ordered() if not _REGISTRY[n].softmax_block)


class _Names(Sequence):
    """The registered names as a live read-only tuple-like view: the paper's four in PAPER_ORDER,
    then the others in registration order."""

    def __getitem__(self, i):
        return _ordered()[i]

    def __len__(self):
        return len(_REGISTRY)

    def __contains__(self, name):
        return name in _REGISTRY

    def __iter__(self):
        return iter(_ordered())

    def __eq__(self, other):
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, _Names)) else other)

    def __hash__(self):
        return hash(tuple(self))

    def __repr__(self):
        return repr(tuple(self))


ARCHS = _Names()
