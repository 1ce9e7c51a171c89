"""HGRN2 checkpoints -> linscale_jax `hgrn2`, for both released layouts.

Official (github Doraemonzzz/hgru2-pytorch, `Hgrn2ForCausalLM`) — the paper's block:
  in_proj [3d, d] rows V|Q|F            -> wi, wq, wf (weights only; in_act none, out_act silu)
  SimpleRMSNorm everywhere (no params)  -> our default norms (eps 1e-6)
  lower_bounds [l, d] (init ones)       -> lower_bounds
  GLU l1 (act glu_act) * l2 -> l3       -> w_v = l1, w_u = l2, w_down = l3 (glu_act none = ours)
  tied lm_head, scale 1 on q            -> our defaults
fla (github fla-org/flash-linear-attention, `HGRN2ForCausalLM`) — differences as config switches:
  q_proj / f_proj / i_proj / o_proj     -> wq, wf, wi, wo
  RMSNorm with weights (attn_norm, mlp_norm, final norm, g_norm)  -> norm_scale=True
  g_norm runs through rms_norm_linear with its default eps 1e-5 (config.norm_eps is not passed)
                                        -> mixer_norm_eps=1e-5; block/final norms: norm_eps
  q scaled by K^-1/2 inside the GLA kernels                       -> hgrn2.q_scale="rsqrt_k"
  SwiGLU channel mixer down(silu(gate) * up)  -> glu_act="silu", w_v = gate, w_u = up
  untied lm_head (tie_word_embeddings false)  -> tie_embeddings=False, lm_head
  lower bound skipped in layer 0        -> nothing to do: β_0 = cumsum(P)_0 - P_0 = 0 in both
Not supported (clear error): fla use_short_conv, hybrid attention layers (config.attn), attnres,
use_lower_bound=false, official norm_type other than simplermsnorm, biases, other activations.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.interop.hf_io import take

ARCH = "hgrn2"


def _heads(d: int, expand_ratio, num_heads=None) -> int:
    if expand_ratio:
        if d % int(expand_ratio):
            raise ValueError(f"config.json: hidden size {d} is not divisible by expand_ratio={expand_ratio}.")
        h = d // int(expand_ratio)
        if num_heads not in (None, h):
            raise ValueError(f"config.json: num_heads={num_heads} != hidden/expand_ratio={h}; not supported.")
        return h
    if num_heads:
        return int(num_heads)
    raise ValueError("config.json: one of expand_ratio / num_heads is needed.")


# ---------------------------------------------------------------- official (hgru2-pytorch)
def official_model_config(hf: dict) -> dict:
    d = int(hf["decoder_embed_dim"])
    checks = {"norm_type": ("simplermsnorm",), "in_act": ("none",), "out_act": ("silu", "swish"),
              "glu_act": ("none", "silu", "swish")}
    for key, allowed in checks.items():
        if hf.get(key, allowed[0]) not in allowed:
            raise ValueError(f"config.json: {key}={hf[key]!r} is not supported; expected one of {allowed}.")
    if hf.get("bias"):
        raise ValueError("config.json: bias=true is not supported (our HGRN2 has no biases).")
    return dict(
        arch=ARCH, n_layers=int(hf["decoder_layers"]), d_model=d,
        n_heads=_heads(d, hf.get("expand_ratio", 128)), ffn_dim=int(hf.get("glu_dim", d)),
        vocab_size=int(hf["vocab_size"]), norm_eps=1e-6,
        glu_act="none" if hf.get("glu_act", "none") == "none" else "silu",
        embed_scale="sqrt_d" if hf.get("no_scale_embedding", True) is False else "none",
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
    )


def official_to_params(hf: dict, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    m = official_model_config(hf)
    l, d, v, g = m["n_layers"], m["d_model"], m["vocab_size"], m["ffn_dim"]
    out = {"embed/embedding": take(state, "model.embed_tokens.weight", (v, d)),
           "lower_bounds": take(state, "model.lower_bounds", (l, d))}
    if not m["tie_embeddings"]:
        out["lm_head/kernel"] = take(state, "lm_head.weight", (v, d)).T
    for j in range(l):
        p, o = f"model.layers.{j}.", f"layers/{j}/"
        vqf = take(state, p + "token_mixer.in_proj.weight", (3 * d, d))
        for name, rows in zip(("wi", "wq", "wf"), np.split(vqf, 3, axis=0)):
            out[o + f"mixer/{name}/kernel"] = rows.T
        out[o + "mixer/wo/kernel"] = take(state, p + "token_mixer.out_proj.weight", (d, d)).T
        out[o + "mlp/w_v/kernel"] = take(state, p + "channel_mixer.l1.weight", (g, d)).T
        out[o + "mlp/w_u/kernel"] = take(state, p + "channel_mixer.l2.weight", (g, d)).T
        out[o + "mlp/w_down/kernel"] = take(state, p + "channel_mixer.l3.weight", (d, g)).T
    return out


# ---------------------------------------------------------------- fla HGRN2ForCausalLM
def _fla_ffn(hf: dict, d: int) -> int:
    if hf.get("intermediate_size"):
        return int(hf["intermediate_size"])
    g = int(d * (hf.get("hidden_ratio") or 4) * 2 / 3)  # fla GatedMLP rule
    return 256 * ((g + 255) // 256)


def fla_model_config(hf: dict) -> dict:
    d = int(hf["hidden_size"])
    unsupported = {"use_short_conv": bool(hf.get("use_short_conv")), "attn": bool(hf.get("attn")),
                   "attnres_block_size": hf.get("attnres_block_size") is not None,
                   "use_lower_bound=false": hf.get("use_lower_bound", True) is False}
    bad = [k for k, on in unsupported.items() if on]
    if bad:
        raise ValueError(f"config.json: {bad} not supported by the hgrn2 module; only the plain fla "
                         "HGRN2 (no short conv, no hybrid attention) converts.")
    if hf.get("hidden_act", "swish") not in ("swish", "silu"):
        raise ValueError(f"config.json: hidden_act={hf['hidden_act']!r}; only swish converts.")
    return dict(
        arch=ARCH, n_layers=int(hf["num_hidden_layers"]), d_model=d,
        n_heads=_heads(d, hf.get("expand_ratio", 128), hf.get("num_heads")), ffn_dim=_fla_ffn(hf, d),
        vocab_size=int(hf["vocab_size"]), norm_eps=float(hf.get("norm_eps", 1e-6)),
        norm_scale=True, mixer_norm_eps=1e-5, glu_act="silu",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        hgrn2=dict(q_scale="rsqrt_k"),
    )


def fla_to_params(hf: dict, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    m = fla_model_config(hf)
    l, d, v, g = m["n_layers"], m["d_model"], m["vocab_size"], m["ffn_dim"]
    out = {"embed/embedding": take(state, "model.embeddings.weight", (v, d)),
           "lower_bounds": take(state, "model.lower_bounds", (l, d)),
           "final_norm/scale": take(state, "model.norm.weight", (d,))}
    if not m["tie_embeddings"]:
        out["lm_head/kernel"] = take(state, "lm_head.weight", (v, d)).T
    for j in range(l):
        p, o = f"model.layers.{j}.", f"layers/{j}/"
        out[o + "norm1/scale"] = take(state, p + "attn_norm.weight", (d,))
        out[o + "norm2/scale"] = take(state, p + "mlp_norm.weight", (d,))
        g_norm = state.get(p + "attn.g_norm.weight")  # absent when elementwise_affine=false
        out[o + "mixer/out_norm/scale"] = np.ones((d,), np.float32) if g_norm is None else take(state, p + "attn.g_norm.weight", (d,))
        for name, ours in (("q", "wq"), ("f", "wf"), ("i", "wi"), ("o", "wo")):
            out[o + f"mixer/{ours}/kernel"] = take(state, p + f"attn.{name}_proj.weight", (d, d)).T
        out[o + "mlp/w_v/kernel"] = take(state, p + "mlp.gate_proj.weight", (g, d)).T
        out[o + "mlp/w_u/kernel"] = take(state, p + "mlp.up_proj.weight", (g, d)).T
        out[o + "mlp/w_down/kernel"] = take(state, p + "mlp.down_proj.weight", (d, g)).T
    return out


# ---------------------------------------------------------------- exports (the inverses)
def _head(cfg, p: dict) -> np.ndarray:
    return p["embed/embedding"] if cfg.tie_embeddings else p["lm_head/kernel"].T


def official_from_params(cfg, v: dict, p: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """Our hgrn2 parameters -> (config.json, state dict) of hgru2-pytorch's Hgrn2ForCausalLM (the
    paper's block); official_to_params reads them back."""
    l, d, h = cfg.n_layers, cfg.d_model, cfg.n_heads
    hf = dict(architectures=["Hgrn2ForCausalLM"], model_type="hgrn2", vocab_size=cfg.vocab_size,
              decoder_embed_dim=d, expand_ratio=d // h, decoder_layers=l, glu_dim=cfg.ffn_dim,
              glu_act=v["glu_act"], in_act="none", out_act="silu", bias=False, norm_type="simplermsnorm",
              no_scale_embedding=v["embed_scale"] == "none", causal=True,
              tie_word_embeddings=cfg.tie_embeddings, init_std=cfg.init_std, torch_dtype="float32")
    sd = {"model.embed_tokens.weight": p["embed/embedding"], "model.lower_bounds": p["lower_bounds"],
          "lm_head.weight": _head(cfg, p)}
    for j in range(l):
        hp, o = f"model.layers.{j}.", f"layers/{j}/"
        sd[hp + "token_mixer.in_proj.weight"] = np.concatenate(
            [p[o + f"mixer/{w}/kernel"].T for w in ("wi", "wq", "wf")], axis=0)
        sd[hp + "token_mixer.out_proj.weight"] = p[o + "mixer/wo/kernel"].T
        sd[hp + "channel_mixer.l1.weight"] = p[o + "mlp/w_v/kernel"].T
        sd[hp + "channel_mixer.l2.weight"] = p[o + "mlp/w_u/kernel"].T
        sd[hp + "channel_mixer.l3.weight"] = p[o + "mlp/w_down/kernel"].T
    return hf, sd


def fla_from_params(cfg, v: dict, p: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """Our hgrn2 parameters -> (config.json, state dict) of fla's HGRN2ForCausalLM; fla_to_params
    reads them back. Norms without a learnable scale (norm_scale=False) are written as scales of 1."""
    l, d, h = cfg.n_layers, cfg.d_model, cfg.n_heads
    ones = np.ones((d,), np.float32)
    scale = lambda key: p.get(key, ones)  # noqa: E731
    hf = dict(architectures=["HGRN2ForCausalLM"], model_type="hgrn2", vocab_size=cfg.vocab_size,
              hidden_size=d, num_hidden_layers=l, num_heads=h, expand_ratio=d // h,
              intermediate_size=cfg.ffn_dim, hidden_act="swish", use_short_conv=False, use_lower_bound=True,
              elementwise_affine=True, norm_eps=cfg.norm_eps, attn_mode="chunk",
              max_position_embeddings=cfg.max_seq_len, tie_word_embeddings=cfg.tie_embeddings,
              initializer_range=cfg.init_std, torch_dtype="float32")
    sd = {"model.embeddings.weight": p["embed/embedding"], "model.lower_bounds": p["lower_bounds"],
          "model.norm.weight": scale("final_norm/scale"), "lm_head.weight": _head(cfg, p)}
    for j in range(l):
        hp, o = f"model.layers.{j}.", f"layers/{j}/"
        sd[hp + "attn_norm.weight"] = scale(o + "norm1/scale")
        sd[hp + "mlp_norm.weight"] = scale(o + "norm2/scale")
        sd[hp + "attn.g_norm.weight"] = scale(o + "mixer/out_norm/scale")
        for name, ours in (("q", "wq"), ("f", "wf"), ("i", "wi"), ("o", "wo")):
            sd[hp + f"attn.{name}_proj.weight"] = p[o + f"mixer/{ours}/kernel"].T
        sd[hp + "mlp.gate_proj.weight"] = p[o + "mlp/w_v/kernel"].T
        sd[hp + "mlp.up_proj.weight"] = p[o + "mlp/w_u/kernel"].T
        sd[hp + "mlp.down_proj.weight"] = p[o + "mlp/w_down/kernel"].T
    return hf, sd
