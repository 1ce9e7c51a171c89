"""ModelConfig: the validated, frozen view of the `model` section of an experiment config.

    cfg = ModelConfig.from_config(config.model)
    cfg = ModelConfig(arch="tnl", d_model=64, n_heads=4, tnl=dict(decay_rule="alibi_layer"))
    cfg.tnl.decay_rule                     # an architecture's own options (ArchSpec.options)
    cfg.replace(n_layers=4, tnl=dict(gate="linear"))

The section holds the fields every model has (shape, dtype, kernels, the decoder and the linear
block's switches) and, under the name of each registered architecture that has options, that
architecture's options: `model.tnl.decay_rule`, `model.hgrn2.q_scale`, `model.cosformer2.tpe`,
`model.llama.n_kv_heads`, ... (on the command line `--config.model.tnl.decay_rule=alibi_layer`; in a
variant label `tnl+decay_rule=alibi_layer`, models.variants). Options of an architecture the model
does not use must keep their defaults. A section written with the earlier flat names (`tnl_gate`,
`tpe`, `n_kv_heads`, ...: LEGACY) is translated on read (`upgrade`), so old checkpoints resume and
evaluate.

Every error names the field and the fix. Shape legend: l layers, d width, h heads, e = d/h head dim,
g GLU width, v vocab.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from kernels_pallas.linear_attention.api import IMPLS
from linscale_jax.models import options as opt
from linscale_jax.models import registry

ARCHS = registry.ARCHS  # the registered architectures (live view; the paper's four first)

DTYPES = ("float32", "bfloat16")
REMATS = ("none", "block", "dots")
EMBED_SCALES = ("none", "sqrt_d")
GLU_ACTS = ("none", "silu")

# The flat names of per-arch options before they moved to model.<arch>.<option>: {old: (arch,
# option)}; and fields that were removed, with the one value they could hold.
LEGACY = {"tnl_decay_rule": ("tnl", "decay_rule"), "tnl_gate": ("tnl", "gate"),
          "tnl_lrpe": ("tnl", "lrpe"), "hgrn2_q_scale": ("hgrn2", "q_scale"),
          "tpe": ("cosformer2", "tpe"), "n_kv_heads": ("llama", "n_kv_heads"),
          "rope_theta": ("llama", "rope_theta")}
REMOVED = {"param_dtype": "float32"}


@dataclasses.dataclass(frozen=True, init=False)
class ModelConfig:
    arch: str = "llama"  # a registered architecture: llama | tnl | hgrn2 | cosformer2 | ...
    size: str = "custom"  # label only: 70m, 160m, ... or a ladder name such as d128
    n_layers: int = 2
    d_model: int = 128
    n_heads: int = 1  # head dim = d_model // n_heads (128 at every paper size)
    ffn_dim: int = 256  # g; paper rule 256 * ceil(int(8d/3) / 256)
    vocab_size: int = 256
    max_seq_len: int = 8192  # longest sequence the model accepts (RoPE/LRPE tables, caches)
    dtype: str = "float32"  # compute dtype: float32 | bfloat16 (parameters stay float32)
    init_std: float = 0.02  # normal init of every weight matrix and the embedding
    norm_eps: float = 1e-6  # RMSNorm / SimpleRMSNorm epsilon
    impl: str = "auto"  # linear attention: auto | reference | xla | pallas
    chunk_size: int = 0  # 0: kernels_pallas.default_chunk_size (per backend); an int for CLI overrides
    short_conv: int = 0  # linear mixers: causal depthwise convolution of width K on q, k, v (fla's use_short_conv; 0 = off, the paper)
    remat: str = "none"  # none | block | dots  (activation checkpointing per block)
    scan_layers: bool = False  # scan over a stacked layer axis (faster compiles for deep models)
    # --- the decoder around the mixers, any arch (released checkpoints; defaults: the paper's) ---
    tie_embeddings: bool = True  # False: separate LM head `lm_head` [d, vocab]
    embed_scale: str = "none"  # none | sqrt_d (embedding output multiplied by sqrt(d))
    # --- the linear archs' block (llama's block fixes these: scales, SwiGLU; defaults: the paper's) ---
    norm_scale: bool = False  # linear blocks: learnable scale in every RMSNorm (llama always has it)
    mixer_norm_eps: float = 0.0  # eps of the linear mixers' output norm (0 = norm_eps)
    glu_act: str = "none"  # linear blocks' GLU activation: none (paper) | silu (llama: always silu)
    # --- model.<arch>.<option>: each registered arch's options (ArchSpec.options), canonical
    # ((arch, options instance), ...) in ARCHS order; given as <arch>=dict(...) keywords ---
    options: tuple = ()

    def __init__(self, **values):
        values = upgrade(values)
        names = [f.name for f in dataclasses.fields(self) if f.name != "options"]
        given = {k: values.pop(k) for k in list(values) if k not in names}
        if "options" in given:
            given.update(dict(given.pop("options")))
        for f in dataclasses.fields(self):
            if f.name != "options":
                object.__setattr__(self, f.name, values.get(f.name, f.default))
        object.__setattr__(self, "options", _canonical_options(given, names))
        self.validate()

    def __getattr__(self, name):
        """cfg.<arch>: that architecture's options (only reached when no field has the name)."""
        if name.startswith("__"):
            raise AttributeError(name)
        for arch, value in object.__getattribute__(self, "options"):
            if arch == name:
                return value
        raise AttributeError(f"ModelConfig has no field or arch options {name!r}")

    @property
    def head_dim(self) -> int:
        """e = d / h."""
        return self.d_model // self.n_heads

    @property
    def archs(self) -> tuple[str, ...]:
        """The architectures whose layers the model has."""
        return (self.arch,)

    @property
    def resolved_chunk_size(self) -> int:
        """The chunk length the linear-attention kernel uses (chunk_size, or the backend's
        default for impl and the key head dim e when 0)."""
        if self.chunk_size:
            return self.chunk_size
        from kernels_pallas import default_chunk_size
        from kernels_pallas.linear_attention.api import resolve_impl

        return default_chunk_size(resolve_impl(self.impl), key_dim=self.head_dim)

    @property
    def out_norm_eps(self) -> float:
        """eps of the linear mixers' output norm."""
        return self.mixer_norm_eps or self.norm_eps

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | Any) -> "ModelConfig":
        """Build from a ConfigDict / dict `model` section (flat names of earlier versions are
        translated, `upgrade`); unknown keys are an error."""
        if hasattr(section, "to_dict"):
            section = section.to_dict()
        return cls(**dict(section))  # missing fields take the defaults

    def replace(self, **changes) -> "ModelConfig":
        """A copy with fields changed; `<arch>=dict(option=value)` changes only those options."""
        values = self.to_dict()
        for key, value in changes.items():
            if isinstance(value, Mapping) and isinstance(values.get(key), dict):
                values[key] = {**values[key], **value}
            elif dataclasses.is_dataclass(value) and isinstance(values.get(key), dict):
                values[key] = opt.as_dict(value)
            else:
                values[key] = value
        return ModelConfig(**values)

    def to_dict(self) -> dict:
        """The model section: the common fields, then {arch: {option: value}} per arch."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "options"}
        out.update({arch: opt.as_dict(value) for arch, value in self.options})
        return out

    def validate(self) -> None:
        def choice(name, value, options):
            if value not in options:
                raise ValueError(
                    f"model.{name}={value!r} is not supported; choose one of {options} "
                    f"(e.g. --config.model.{name}={options[0]})."
                )

        choice("arch", self.arch, ARCHS)
        choice("dtype", self.dtype, DTYPES)
        choice("impl", self.impl, IMPLS)
        choice("remat", self.remat, REMATS)
        choice("embed_scale", self.embed_scale, EMBED_SCALES)
        choice("glu_act", self.glu_act, GLU_ACTS)
        for name in ("n_layers", "d_model", "n_heads", "ffn_dim", "vocab_size", "max_seq_len",
                     "chunk_size"):
            value = getattr(self, name)
            if name == "chunk_size" and value == 0:  # the backend's default
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"model.{name}={value!r} must be a positive integer.")
        if self.d_model % self.n_heads:
            divisors = [h for h in range(1, self.d_model + 1) if self.d_model % h == 0]
            near = sorted(divisors, key=lambda h: abs(h - self.n_heads))[:3]
            raise ValueError(
                f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}: "
                f"the head dim must be an integer. Set n_heads to a divisor of d_model "
                f"(nearest: {sorted(near)}; the paper uses n_heads = d_model // 128)."
            )
        if self.init_std <= 0 or self.norm_eps <= 0:
            raise ValueError("model.init_std and model.norm_eps must be > 0.")
        if not isinstance(self.short_conv, int) or isinstance(self.short_conv, bool) or self.short_conv < 0:
            raise ValueError(f"model.short_conv={self.short_conv!r} must be an integer >= 0 (the "
                             "convolution width; 0 = off, e.g. --config.model.short_conv=4).")
        if self.mixer_norm_eps < 0:
            raise ValueError("model.mixer_norm_eps must be >= 0 (0 = use model.norm_eps).")
        self._validate_linear_block()
        self._validate_options()
        self.check_sequence(self.max_seq_len, "model.max_seq_len")

    def check_sequence(self, seq_len: int, name: str = "train.seq_len") -> None:
        """The options against a sequence of seq_len tokens (`name` says where it comes from): it
        fits model.max_seq_len, and no convolution is wider than it (its taps beyond the first
        token would read only padding). One line naming the field and the fix."""
        if seq_len > self.max_seq_len:
            raise ValueError(f"{name}={seq_len} exceeds model.max_seq_len={self.max_seq_len}; "
                             f"shorten it or raise --config.model.max_seq_len.")
        if self.short_conv > seq_len:
            raise ValueError(
                f"model.short_conv={self.short_conv} is wider than the sequence ({name}={seq_len}): "
                f"its taps beyond the first token would read only padding; use a width <= "
                f"{seq_len} (fla, Mamba and Based use 4: --config.model.short_conv=4).")
        for arch, value in self.options:
            check = getattr(value, "check_sequence", None)
            if arch in self.archs and check is not None:
                check(self, seq_len, name)

    def _validate_linear_block(self) -> None:
        """The linear block's switches need a linear layer; llama's block fixes them."""
        if any(not registry.get(a).softmax_block for a in self.archs):
            return
        defaults = ModelConfig.__dataclass_fields__
        for name in ("short_conv", "norm_scale", "mixer_norm_eps", "glu_act"):
            if getattr(self, name) != defaults[name].default:
                raise ValueError(
                    f"model.{name} applies to the linear mixers' blocks, not {self.arch!r} (whose "
                    f"block is fixed: RMSNorm with scales, SwiGLU); set --config.model.{name}="
                    f"{defaults[name].default}.")

    def _validate_options(self) -> None:
        for arch, value in self.options:
            if arch in self.archs:
                opt.validate(arch, value, self)
                continue
            default = registry.get(arch).options()
            changed = [f.name for f in opt.fields(type(value)) if getattr(value, f.name) !=
                       getattr(default, f.name)]
            if changed:
                name = changed[0]
                raise ValueError(
                    f"model.{arch}.{name}={getattr(value, name)!r} applies to {arch} layers, and "
                    f"this model has none (model.arch={self.arch}); drop it (default "
                    f"{getattr(default, name)!r}) or set --config.model.arch={arch}.")


def _canonical_options(given: dict, field_names) -> tuple:
    """{arch: options instance or partial dict} -> ((arch, options), ...) for every registered arch
    with options, in ARCHS order (missing ones at their defaults)."""
    for key in given:
        if key not in registry.ARCHS or registry.get(key).options is None:
            with_options = [a for a in registry.ARCHS if registry.get(a).options is not None]
            raise ValueError(
                f"model config: unknown field {key!r}; valid fields are {sorted(field_names)} and "
                f"the options sections {with_options} (see linscale_jax.models.config.ModelConfig).")
    out = []
    for arch in registry.ARCHS:
        cls = registry.get(arch).options
        if cls is None:
            continue
        clash = {f.name for f in opt.fields(cls)} & set(field_names)
        if clash:
            raise TypeError(f"{arch}: option(s) {sorted(clash)} reuse a common model field's name "
                            "(a variant label could not tell them apart); rename them.")
        value = given.get(arch, {})
        if isinstance(value, cls):
            out.append((arch, value))
            continue
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        if not isinstance(value, Mapping):
            raise ValueError(f"model.{arch} must be a section of {arch}'s options "
                             f"({[f.name for f in opt.fields(cls)]}), got {value!r}.")
        out.append((arch, opt.coerce(arch, cls, dict(value))))
    return tuple(out)


def upgrade(section: Mapping[str, Any]) -> dict:
    """A model section with the flat names of earlier versions (LEGACY: `tnl_gate`, `tpe`,
    `n_kv_heads`, ...) moved under their arch's options, and removed fields (REMOVED) dropped; a
    section in today's form is returned as it is. A value given both ways must agree."""
    section = dict(section)
    for old, (arch, name) in LEGACY.items():
        if old not in section:
            continue
        value = section.pop(old)
        sub = section.get(arch, {})
        sub = dict(sub.to_dict() if hasattr(sub, "to_dict") else sub)
        if name in sub and sub[name] != value:
            raise ValueError(f"model.{old}={value!r} (the earlier name of model.{arch}.{name}) "
                             f"disagrees with model.{arch}.{name}={sub[name]!r}; keep one of them.")
        sub[name] = value
        section[arch] = sub
    for old, only in REMOVED.items():
        if old in section and section.pop(old) != only:
            raise ValueError(f"model.{old}: parameters are kept in {only}; drop the field (set "
                             "model.dtype=bfloat16 for bf16 compute).")
    return section


def upgrade_config(config: dict) -> dict:
    """A stored experiment config (a checkpoint's metadata["config"]) with its model section
    upgraded (`upgrade`); other sections untouched."""
    if isinstance(config, dict) and isinstance(config.get("model"), dict):
        return {**config, "model": upgrade(config["model"])}
    return config


def shape_fields() -> tuple[str, ...]:
    """The model fields that fix parameter shapes (a resume cannot change them): the common ones
    and each arch's options marked shape=True, as dotted names under `model.`."""
    common = ("arch", "n_layers", "d_model", "n_heads", "ffn_dim", "vocab_size", "tie_embeddings",
              "scan_layers", "norm_scale", "short_conv")
    per_arch = [name for a in registry.ARCHS if registry.get(a).options is not None
                for name in opt.shape_fields(a, registry.get(a).options)]
    return tuple(f"model.{k}" for k in common + tuple(per_arch))
