"""Format registry: turn a released checkpoint into a linscale_jax model (and back for LLaMA).

    section, model = load("hgrn2-fla", "/path/to/hf_snapshot")
    section, model = convert("hgrn2-fla", hf_config_dict, state_dict)   # arrays already in memory
    config = experiment_config(section)                                  # full base_config()
"""

from __future__ import annotations

import ml_collections
from flax import nnx

from linscale_jax.config import base_config
from linscale_jax.interop import FORMATS, hf_io, hf_llama, hgrn2, transnormerllm

CONVERTERS = {
    "hf-llama": (hf_llama.model_config, hf_llama.to_params),
    "transnormerllm": (transnormerllm.model_config, transnormerllm.to_params),
    "hgrn2-fla": (hgrn2.fla_model_config, hgrn2.fla_to_params),
    "hgrn2-official": (hgrn2.official_model_config, hgrn2.official_to_params),
}
assert tuple(CONVERTERS) == FORMATS


def _converter(fmt: str):
    if fmt not in CONVERTERS:
        raise ValueError(f"unknown checkpoint format {fmt!r}; choose one of {FORMATS}.")
    return CONVERTERS[fmt]


def build(section: dict, values: dict, seed: int = 0):
    """Build the model described by `section` (a model config section) and load `values` into it."""
    from linscale_jax.models import ModelConfig, build_model

    cfg = ModelConfig.from_config(section)
    model = build_model(cfg, rngs=nnx.Rngs(seed))
    hf_io.set_model_params(model, values)
    return model


def convert(fmt: str, hf_config: dict, state: dict):
    """(HF config dict, {name: array}) -> (model section dict, model with the converted weights)."""
    model_config, to_params = _converter(fmt)
    section = model_config(hf_config)
    return section, build(section, to_params(hf_config, state))


def load(fmt: str, src: str):
    """Read the checkpoint directory `src` (config.json + weights) and convert it."""
    _converter(fmt)
    return convert(fmt, hf_io.read_config(src), hf_io.read_weights(src))


def experiment_config(section: dict) -> ml_collections.ConfigDict:
    """A full experiment config (base_config defaults) whose model section is `section` (an
    arch's options, e.g. {"tnl": {"gate": "linear"}}, set field by field)."""
    from linscale_jax.models import sizes

    config = base_config()
    sizes.apply_model(config.model, section)
    config.train.seq_len = min(config.train.seq_len, int(config.model.max_seq_len))
    return config
