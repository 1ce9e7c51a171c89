"""build_model: ModelConfig -> the architecture's flax.nnx.Module (parameters float32)."""

from __future__ import annotations

from flax import nnx

from linscale_jax.models import registry
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.decoder import Decoder
from linscale_jax.models.layers import KeyGen


def model_class(arch: str):
    """The registered architecture's Decoder class (the plain Decoder when it registers none)."""
    return registry.get(arch).model or Decoder


def build_model(cfg: ModelConfig, rngs: nnx.Rngs | None = None, *, seed: int = 0) -> nnx.Module:
    """cfg: a ModelConfig (or a `model` ConfigDict section, validated here)."""
    if not isinstance(cfg, ModelConfig):
        cfg = ModelConfig.from_config(cfg)
    if rngs is None:
        rngs = nnx.Rngs(seed)
    return model_class(cfg.arch)(cfg, keys=KeyGen(rngs.params()))
