"""Hugging Face `LlamaForCausalLM` <-> linscale_jax `llama`.

Layouts. HF stores nn.Linear weights as [out, in]; our `Linear.kernel` is [in, out], so every matrix
is transposed. HF checkpoints (the format written by transformers' convert_llama_weights_to_hf) keep
q/k in the *half-split* rotary layout used by `rotate_half` — Meta's interleaved-pair layout was
already permuted away by that script — and our `rope` is the same half-split form, so q_proj/k_proj
map over without a permutation (the parity test pins this down). SwiGLU: HF down(silu(gate) * up) ==
our w_down(w_u(x) * silu(w_v(x))), so gate_proj -> w_v, up_proj -> w_u. Grouped-query attention
(num_key_value_heads < num_attention_heads) maps to model.llama.n_kv_heads; an untied lm_head maps
to model.tie_embeddings=False and the `lm_head` parameter.

Not supported (clear error): biases, rope scaling other than 'default', head_dim != d/h,
activations other than silu.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.interop.hf_io import take

ARCH = "llama"


def _rope_theta(hf: dict) -> float:
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ValueError(
            f"config.json: rope_type={rope_type!r} (rope scaling) is not supported; only the plain "
            "RoPE of LLaMA-1/2 style checkpoints converts."
        )
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def model_config(hf: dict) -> dict:
    """HF LlamaConfig dict -> our `model` config section."""
    d, h = int(hf["hidden_size"]), int(hf["num_attention_heads"])
    kv = int(hf.get("num_key_value_heads") or h)
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            raise ValueError(f"config.json: {flag}=true is not supported (our LLaMA has no biases).")
    if hf.get("hidden_act", "silu") not in ("silu", "swish"):
        raise ValueError(f"config.json: hidden_act={hf['hidden_act']!r}; only silu (SwiGLU) converts.")
    if hf.get("head_dim") not in (None, d // h):
        raise ValueError(f"config.json: head_dim={hf['head_dim']} != hidden_size/num_attention_heads; not supported.")
    if hf.get("pretraining_tp", 1) not in (1, None):
        raise ValueError("config.json: pretraining_tp > 1 is not supported; re-save the model with tp=1.")
    return dict(
        arch=ARCH,
        n_layers=int(hf["num_hidden_layers"]),
        d_model=d,
        n_heads=h,
        ffn_dim=int(hf["intermediate_size"]),
        vocab_size=int(hf["vocab_size"]),
        max_seq_len=int(hf.get("max_position_embeddings") or 8192),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        llama=dict(n_kv_heads=kv, rope_theta=_rope_theta(hf)),
    )


def to_params(hf: dict, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF state dict -> {our param path: array}."""
    m = model_config(hf)
    d, v, g = m["d_model"], m["vocab_size"], m["ffn_dim"]
    e = d // m["n_heads"]
    kvd = m["llama"]["n_kv_heads"] * e
    out = {
        "embed/embedding": take(state, "model.embed_tokens.weight", (v, d)),
        "final_norm/scale": take(state, "model.norm.weight", (d,)),
    }
    if not m["tie_embeddings"]:
        out["lm_head/kernel"] = take(state, "lm_head.weight", (v, d)).T
    for j in range(m["n_layers"]):
        p, o = f"model.layers.{j}.", f"layers/{j}/"
        out[o + "norm1/scale"] = take(state, p + "input_layernorm.weight", (d,))
        out[o + "norm2/scale"] = take(state, p + "post_attention_layernorm.weight", (d,))
        out[o + "mixer/wq/kernel"] = take(state, p + "self_attn.q_proj.weight", (d, d)).T
        out[o + "mixer/wk/kernel"] = take(state, p + "self_attn.k_proj.weight", (kvd, d)).T
        out[o + "mixer/wv/kernel"] = take(state, p + "self_attn.v_proj.weight", (kvd, d)).T
        out[o + "mixer/wo/kernel"] = take(state, p + "self_attn.o_proj.weight", (d, d)).T
        out[o + "mlp/w_v/kernel"] = take(state, p + "mlp.gate_proj.weight", (g, d)).T
        out[o + "mlp/w_u/kernel"] = take(state, p + "mlp.up_proj.weight", (g, d)).T
        out[o + "mlp/w_down/kernel"] = take(state, p + "mlp.down_proj.weight", (d, g)).T
    return out


def from_params(cfg, v: dict, p: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """Our llama parameters (export.variant fields `v`, per-layer paths) -> (HF config dict, HF
    state dict) loadable by LlamaForCausalLM; to_params reads them back."""
    l, d, h = cfg.n_layers, cfg.d_model, cfg.n_heads
    tied = cfg.tie_embeddings
    hf = dict(
        architectures=["LlamaForCausalLM"], model_type="llama",
        vocab_size=cfg.vocab_size, hidden_size=d, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=l, num_attention_heads=h, num_key_value_heads=v["llama.n_kv_heads"], head_dim=d // h,
        hidden_act="silu", max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=cfg.norm_eps, tie_word_embeddings=tied, rope_theta=v["llama.rope_theta"],
        rope_parameters={"rope_type": "default", "rope_theta": v["llama.rope_theta"]},
        attention_bias=False, mlp_bias=False, torch_dtype="float32",
    )
    sd = {"model.embed_tokens.weight": p["embed/embedding"], "model.norm.weight": p["final_norm/scale"]}
    if not tied:
        sd["lm_head.weight"] = p["lm_head/kernel"].T
    for j in range(l):
        hp, o = f"model.layers.{j}.", f"layers/{j}/"
        sd[hp + "input_layernorm.weight"] = p[o + "norm1/scale"]
        sd[hp + "post_attention_layernorm.weight"] = p[o + "norm2/scale"]
        for name, ours in (("q", "wq"), ("k", "wk"), ("v", "wv"), ("o", "wo")):
            sd[hp + f"self_attn.{name}_proj.weight"] = p[o + f"mixer/{ours}/kernel"].T
        sd[hp + "mlp.gate_proj.weight"] = p[o + "mlp/w_v/kernel"].T
        sd[hp + "mlp.up_proj.weight"] = p[o + "mlp/w_u/kernel"].T
        sd[hp + "mlp.down_proj.weight"] = p[o + "mlp/w_down/kernel"].T
    return hf, sd
