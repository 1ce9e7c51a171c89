"""Weights out: a run's checkpoint in a released layout, the one the matching importer reads.

    hf, state = export.export("hgrn2-official", model, cfg)    # cfg: ModelConfig of the model
    export.check("transnormerllm", cfg)                          # ExportError naming what differs

  format           arch   layout (read back by loading.CONVERTERS[format])
  hf-llama         llama  transformers LlamaForCausalLM
  transnormerllm   tnl    OpenNLPLab TransnormerForCausalLM (hub remote code)
  hgrn2-official   hgrn2  hgru2-pytorch Hgrn2ForCausalLM (the paper's block)
  hgrn2-fla        hgrn2  fla HGRN2ForCausalLM

An export is exact or refused: a layout holds only the models its code computes, so each lists the
fields it fixes (the released variants' switches, e.g. TransNormerLLM's full-rank linear output
gate, model.tnl.gate="linear"), and a model with another value is refused in one line naming the field,
what the layout has, and the overrides that train an exportable model. cosFormer2 has no released
home and is refused. `variant` is the one place that reads ModelConfig's arch-specific fields.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from linscale_jax.errors import Refusal
from linscale_jax.interop import hf_io, hf_llama, hgrn2, transnormerllm


class ExportError(Refusal, ValueError):
    """The model cannot be written in the asked layout (message: what differs and the fix)."""


def variant(cfg) -> dict:
    """The fields of a ModelConfig beyond its shape that the exports read (and `check` compares),
    keyed by their path under `model`: the one place that knows where ModelConfig keeps them."""
    return {"llama.n_kv_heads": cfg.llama.n_kv_heads or cfg.n_heads, "llama.rope_theta": cfg.llama.rope_theta,
            "tnl.gate": cfg.tnl.gate, "tnl.lrpe": cfg.tnl.lrpe, "tnl.decay_rule": cfg.tnl.decay_rule,
            "hgrn2.q_scale": cfg.hgrn2.q_scale, "glu_act": cfg.glu_act, "norm_scale": cfg.norm_scale,
            "norm_eps": cfg.norm_eps, "mixer_norm_eps": cfg.out_norm_eps, "embed_scale": cfg.embed_scale,
            "short_conv": cfg.short_conv}


@dataclasses.dataclass(frozen=True)
class Layout:
    arch: str
    name: str  # what the layout is, in words
    write: Callable  # (cfg, variant, per-layer params) -> (config.json dict, state dict)
    fixed: tuple = ()  # (variant field, the value the layout holds, what its code does)


_SIMPLE_NORMS = (("norm_scale", False, "its norms have no weights"),
                 ("norm_eps", 1e-6, "its SimpleRMSNorm eps is 1e-6"),
                 ("mixer_norm_eps", 1e-6, "its output norm eps is 1e-6"),
                 ("short_conv", 0, "it has no short convolution"))
LAYOUTS = {
    "hf-llama": Layout("llama", "Hugging Face LlamaForCausalLM", hf_llama.from_params),
    "transnormerllm": Layout("tnl", "TransNormerLLM (TransnormerForCausalLM)", transnormerllm.from_params, (
        ("tnl.gate", "linear", "its output gate is a full-rank linear map, no sigmoid"),
        ("tnl.decay_rule", "alibi_layer", "its decay is ALiBi slopes scaled per layer, fixed in its code"),
        ("glu_act", "none", "its GLU has no activation"), *_SIMPLE_NORMS)),
    "hgrn2-official": Layout("hgrn2", "hgru2-pytorch Hgrn2ForCausalLM", hgrn2.official_from_params, (
        ("hgrn2.q_scale", "one", "it does not scale q"), *_SIMPLE_NORMS)),
    "hgrn2-fla": Layout("hgrn2", "fla HGRN2ForCausalLM", hgrn2.fla_from_params, (
        ("glu_act", "silu", "its channel mixer is SwiGLU"),
        ("hgrn2.q_scale", "rsqrt_k", "its kernels scale q by (d/h)^-1/2"),
        ("mixer_norm_eps", 1e-5, "its output norm eps is 1e-5"),
        ("embed_scale", "none", "it does not scale the embedding"),
        ("short_conv", 0, "the importer reads no short convolution"))),
}
FORMATS = tuple(LAYOUTS)
NO_HOME = {"cosformer2": "cosFormer2 has no released checkpoint layout (its authors released no code "
                         "and no library ships the model)"}


def check(fmt: str, cfg) -> None:
    """Refuse (ExportError) a model the layout `fmt` cannot hold exactly."""
    layout = LAYOUTS[fmt]
    if cfg.arch != layout.arch:
        if cfg.arch in NO_HOME:
            raise ExportError(f"{NO_HOME[cfg.arch]}, so there is nothing to export it to; its run's "
                              "checkpoints are read by eval and generate as they are.")
        fits = [f for f, lay in LAYOUTS.items() if lay.arch == cfg.arch]
        fix = f"use --to={' or --to='.join(fits)}" if fits else "no layout holds this arch"
        raise ExportError(f"--to={fmt} writes {layout.arch} models and this run is {cfg.arch}; {fix}.")
    v = variant(cfg)
    wrong = [(field, want, why) for field, want, why in layout.fixed if v[field] != want]
    if wrong:
        what = ", ".join(f"model.{f}={v[f]!r} ({why})" for f, want, why in wrong)
        flags = " ".join(f"--config.model.{f}={want}" for f, want, _ in wrong)
        raise ExportError(f"the {layout.name} layout cannot hold this {cfg.arch} model: {what}; export a model "
                          f"trained with {flags}"
                          f"{', or use --to=hgrn2-official' if fmt == 'hgrn2-fla' else ''}.")


def per_layer(params: dict[str, np.ndarray], n_layers: int) -> dict[str, np.ndarray]:
    """Parameters with paths layers/<j>/...: a scan_layers model's stacked layers/... [l, ...] split."""
    out = {}
    for key, value in params.items():
        parts = key.split("/")
        if parts[0] == "layers" and not parts[1].isdigit():
            for j in range(n_layers):
                out["/".join(["layers", str(j), *parts[1:]])] = value[j]
        else:
            out[key] = value
    return out


def export(fmt: str, model, cfg) -> tuple[dict, dict[str, np.ndarray]]:
    """(config.json dict, {name: float32 array}) of `model` in layout `fmt` (checked first)."""
    check(fmt, cfg)
    params = per_layer(hf_io.model_params(model), cfg.n_layers)
    hf, state = LAYOUTS[fmt].write(cfg, variant(cfg), params)
    return hf, {k: np.ascontiguousarray(v, np.float32) for k, v in state.items()}
