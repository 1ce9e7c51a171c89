"""build_model: ModelConfig -> the architecture's flax.nnx.Module (parameters float32)."""

from __future__ import annotations

from flax import nnx

from linscale_jax.models.config import ModelConfig


def model_class(arch: str):
    from linscale_jax.models.cosformer2 import Cosformer2
    from linscale_jax.models.hgrn2 import HGRN2
    from linscale_jax.models.llama import Llama
    from linscale_jax.models.tnl import TNL

    classes = {"llama": Llama, "tnl": TNL, "hgrn2": HGRN2, "cosformer2": Cosformer2}
    if arch not in classes:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {tuple(classes)}.")
    return classes[arch]


def build_model(cfg: ModelConfig, rngs: nnx.Rngs | None = None, *, seed: int = 0) -> nnx.Module:
    """cfg: a ModelConfig (or a `model` ConfigDict section, validated here)."""
    if not isinstance(cfg, ModelConfig):
        cfg = ModelConfig.from_config(cfg)
    if rngs is None:
        rngs = nnx.Rngs(seed)
    from linscale_jax.models.layers import KeyGen

    return model_class(cfg.arch)(cfg, keys=KeyGen(rngs.params()))
