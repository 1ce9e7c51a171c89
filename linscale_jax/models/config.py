"""ModelConfig: the validated, frozen view of the `model` section of an experiment config.

    cfg = ModelConfig.from_config(config.model)

Every error names the field and the fix. Shape legend: l layers, d width, h heads, e = d/h head dim,
g GLU width, v vocab.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from kernels_pallas.linear_attention.api import IMPLS
from linscale_jax.models import registry

ARCHS = registry.ARCHS  # the registered architectures (live view; the paper's four first)

DTYPES = ("float32", "bfloat16")
REMATS = ("none", "block", "dots")
TNL_DECAY_RULES = ("paper", "alibi_layer")
TPES = ("lightnet", "lightnet_untied", "xmixers", "none")
EMBED_SCALES = ("none", "sqrt_d")
GLU_ACTS = ("none", "silu")
HGRN2_Q_SCALES = ("one", "rsqrt_k")
TNL_GATES = ("lowrank", "linear")


@dataclasses.dataclass(frozen=True)
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
    param_dtype: str = "float32"
    init_std: float = 0.02  # normal init of every weight matrix and the embedding
    norm_eps: float = 1e-6  # RMSNorm / SimpleRMSNorm epsilon
    rope_theta: float = 10000.0  # llama
    impl: str = "auto"  # linear attention: auto | reference | xla | pallas
    chunk_size: int = 0  # 0: kernels_pallas.default_chunk_size (per backend); an int for CLI overrides
    tnl_decay_rule: str = "paper"  # paper (exp(-(8i/h)(1 - j/l))) | alibi_layer (released TNL)
    tpe: str = "lightnet"  # cosformer2 Toeplitz positional encoding: lightnet (paper, d·e) | lightnet_untied | xmixers | none
    short_conv: int = 0  # linear mixers: causal depthwise convolution of width K on q, k, v (fla's use_short_conv; 0 = off, the paper)
    remat: str = "none"  # none | block | dots  (activation checkpointing per block)
    scan_layers: bool = False  # scan over a stacked layer axis (faster compiles for deep models)
    # --- variants of released checkpoints (interop); the defaults are the paper's blocks ---
    n_kv_heads: int = 0  # llama grouped-query attention: key/value heads (0 = n_heads)
    tie_embeddings: bool = True  # False: separate LM head `lm_head` [d, vocab]
    embed_scale: str = "none"  # none | sqrt_d (embedding output multiplied by sqrt(d))
    norm_scale: bool = False  # linear models: learnable scale in every RMSNorm (llama always has it)
    mixer_norm_eps: float = 0.0  # eps of the mixer output norm (0 = norm_eps)
    glu_act: str = "none"  # linear models' GLU activation: none (paper) | silu (llama: always silu)
    hgrn2_q_scale: str = "one"  # one (paper) | rsqrt_k (fla: q scaled by (d/h)^-1/2)
    tnl_gate: str = "lowrank"  # lowrank (paper: sigmoid(X W_gdown W_gup)) | linear (released: X W_u)
    tnl_lrpe: bool = False  # released TransNormerLLM: LRPE on TNL's q, k (θ [h, d/h] per layer)

    def __post_init__(self):
        self.validate()

    @property
    def head_dim(self) -> int:
        """e = d / h."""
        return self.d_model // self.n_heads

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
    def kv_heads(self) -> int:
        """Key/value heads of llama attention (n_kv_heads, 0 meaning n_heads)."""
        return self.n_kv_heads or self.n_heads

    @property
    def out_norm_eps(self) -> float:
        """eps of the linear mixers' output norm."""
        return self.mixer_norm_eps or self.norm_eps

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | Any) -> "ModelConfig":
        """Build from a ConfigDict / dict `model` section; unknown keys are an error."""
        if hasattr(section, "to_dict"):
            section = section.to_dict()
        section = dict(section)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(section) - names)
        if unknown:
            raise ValueError(
                f"model config: unknown field(s) {unknown}; valid fields are {sorted(names)} "
                "(see the fields of linscale_jax.models.config.ModelConfig)."
            )
        return cls(**section)  # missing fields take the dataclass defaults

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

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
        choice("tnl_decay_rule", self.tnl_decay_rule, TNL_DECAY_RULES)
        choice("tpe", self.tpe, TPES)
        choice("embed_scale", self.embed_scale, EMBED_SCALES)
        choice("glu_act", self.glu_act, GLU_ACTS)
        choice("hgrn2_q_scale", self.hgrn2_q_scale, HGRN2_Q_SCALES)
        choice("tnl_gate", self.tnl_gate, TNL_GATES)
        if self.n_kv_heads < 0 or (self.n_kv_heads and self.n_heads % self.n_kv_heads):
            raise ValueError(
                f"model.n_kv_heads={self.n_kv_heads} must divide model.n_heads={self.n_heads} "
                "(0 means n_kv_heads = n_heads)."
            )
        if self.n_kv_heads and self.arch != "llama":
            raise ValueError("model.n_kv_heads (grouped-query attention) applies to llama only; set it to 0.")
        if not isinstance(self.short_conv, int) or isinstance(self.short_conv, bool) or self.short_conv < 0:
            raise ValueError(f"model.short_conv={self.short_conv!r} must be an integer >= 0 (the "
                             "convolution width; 0 = off, e.g. --config.model.short_conv=4).")
        if self.short_conv and registry.get(self.arch).softmax_block:
            raise ValueError(f"model.short_conv applies to the linear mixers, not {self.arch!r}; set "
                             "--config.model.short_conv=0.")
        if self.mixer_norm_eps < 0:
            raise ValueError("model.mixer_norm_eps must be >= 0 (0 = use model.norm_eps).")
        if self.param_dtype != "float32":
            raise ValueError(
                f"model.param_dtype={self.param_dtype!r}: parameters are kept in float32; "
                "set model.dtype=bfloat16 for bf16 compute instead."
            )
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
        if self.arch == "llama" and self.head_dim % 2:
            raise ValueError(
                f"llama: head dim d_model/n_heads = {self.head_dim} must be even for RoPE; "
                "change model.n_heads."
            )
        if self.init_std <= 0 or self.norm_eps <= 0:
            raise ValueError("model.init_std and model.norm_eps must be > 0.")
