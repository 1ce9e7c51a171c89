"""OpenNLPLab TransNormerLLM (HF-hub remote code `TransnormerForCausalLM`) -> linscale_jax `tnl`.

The released block differs from the paper's TNL block; the differences are config switches of the
TNL module (see linscale_jax/models/tnl.py), set here from config.json:

  released TransNormerLLM                          our switch
  fused qkvu_proj [4d, d] (rows q|k|v|u)           split into wq, wk, wv, wu (weights only)
  O = SRMSNorm(o) * u, u = X̄ W_u (full rank,       tnl.gate="linear"   (paper: low-rank sigmoid
      no activation) before out_proj                                   gate sigmoid(X W_gdown W_gup))
  LRPE on q, k in layers with linear_use_lrpe_list  tnl.lrpe=True, θ [h, e] in every layer: the
                                                   listed layers' θ, and θ = 0 in the others (LRPE
                                                   with θ = 0 is exactly the identity: [q, 0])
  embedding scaled by sqrt(d) unless                embed_scale="sqrt_d"
      no_scale_embedding
  decay: ALiBi slopes * (1 - j/(l-1) + 1e-5)        tnl.decay_rule="alibi_layer"
  SimpleRMSNorm everywhere, eps 1e-6                norm_eps=1e-6 (our default)
  GLU without activation, l1 * l2 -> l3             w_u = l1, w_v = l2, w_down = l3
  lm_head tied (tie_word_embeddings, HF default)   tie_embeddings

Not supported (clear error): norm_type other than simplermsnorm (nn.LayerNorm), linear_act_fun other
than silu/swish, biases, hidden_dim != decoder_embed_dim.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.interop.hf_io import take

ARCH = "tnl"


def model_config(hf: dict) -> dict:
    d, h, l = int(hf["decoder_embed_dim"]), int(hf["decoder_attention_heads"]), int(hf["decoder_layers"])
    if hf.get("norm_type", "simplermsnorm") != "simplermsnorm":
        raise ValueError(f"config.json: norm_type={hf['norm_type']!r}; only simplermsnorm checkpoints convert.")
    if hf.get("linear_act_fun", "silu") not in ("silu", "swish"):
        raise ValueError(f"config.json: linear_act_fun={hf['linear_act_fun']!r}; only silu converts.")
    if hf.get("bias"):
        raise ValueError("config.json: bias=true is not supported (our TNL has no biases).")
    if int(hf.get("hidden_dim", d)) != d:
        raise ValueError(f"config.json: hidden_dim={hf['hidden_dim']} != decoder_embed_dim={d}; not supported.")
    glu = int(hf.get("glu_dim", d))
    lrpe = [int(x) for x in (hf.get("linear_use_lrpe_list") or [])]
    if lrpe and len(lrpe) != l:
        raise ValueError(f"config.json: linear_use_lrpe_list has {len(lrpe)} entries for {l} layers.")
    return dict(
        arch=ARCH, n_layers=l, d_model=d, n_heads=h, ffn_dim=d if glu == -1 else glu,
        vocab_size=int(hf["vocab_size"]), norm_eps=1e-6,
        embed_scale="none" if hf.get("no_scale_embedding", False) else "sqrt_d",
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        tnl=dict(decay_rule="alibi_layer", gate="linear", lrpe=any(lrpe)),
    )


def to_params(hf: dict, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    m = model_config(hf)
    d, v, g, h = m["d_model"], m["vocab_size"], m["ffn_dim"], m["n_heads"]
    e = d // h
    out = {"embed/embedding": take(state, "model.embed_tokens.weight", (v, d))}
    if not m["tie_embeddings"]:
        out["lm_head/kernel"] = take(state, "lm_head.weight", (v, d)).T
    for j in range(m["n_layers"]):
        p, o = f"model.layers.{j}.", f"layers/{j}/"
        qkvu = take(state, p + "token_mixer.qkvu_proj.weight", (4 * d, d))
        for name, rows in zip(("wq", "wk", "wv", "wu"), np.split(qkvu, 4, axis=0)):
            out[o + f"mixer/{name}/kernel"] = rows.T
        out[o + "mixer/wo/kernel"] = take(state, p + "token_mixer.out_proj.weight", (d, d)).T
        if m["tnl"]["lrpe"]:  # uniform layers: θ = 0 turns LRPE into the identity where the release has none
            lrpe = (hf.get("linear_use_lrpe_list") or [])[j]
            out[o + "mixer/theta"] = (take(state, p + "token_mixer.lrpe.theta", (h, 1, e)).reshape(h, e)
                                      if lrpe else np.zeros((h, e), np.float32))
        out[o + "mlp/w_u/kernel"] = take(state, p + "channel_mixer.l1.weight", (g, d)).T
        out[o + "mlp/w_v/kernel"] = take(state, p + "channel_mixer.l2.weight", (g, d)).T
        out[o + "mlp/w_down/kernel"] = take(state, p + "channel_mixer.l3.weight", (d, g)).T
    return out


HUB_CODE = "OpenNLPLab/TransNormerLLM-385M"  # the released remote code (configuration/modeling_transnormer.py)


def from_params(cfg, v: dict, p: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """Our tnl parameters (export.variant fields `v`, per-layer paths) -> (config.json, state dict)
    of TransnormerForCausalLM; to_params reads them back. A layer whose LRPE θ is all zero (an
    import of a layer without LRPE) is written without it."""
    l, d, h, g = cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim
    e = d // h
    lrpe = [int(v["tnl.lrpe"] and bool(np.any(p[f"layers/{j}/mixer/theta"]))) for j in range(l)]
    hf = dict(
        architectures=["TransnormerForCausalLM"], model_type="transnormer",
        auto_map={"AutoConfig": f"{HUB_CODE}--configuration_transnormer.TransnormerConfig",
                  "AutoModelForCausalLM": f"{HUB_CODE}--modeling_transnormer.TransnormerForCausalLM"},
        vocab_size=cfg.vocab_size, decoder_embed_dim=d, hidden_dim=d, decoder_layers=l,
        decoder_attention_heads=h, glu_dim=g, linear_use_lrpe_list=lrpe,
        no_scale_embedding=v["embed_scale"] == "none", norm_type="simplermsnorm", linear_act_fun="silu",
        bias=False, tie_word_embeddings=cfg.tie_embeddings, init_std=cfg.init_std, torch_dtype="float32",
    )
    sd = {"model.embed_tokens.weight": p["embed/embedding"],
          "lm_head.weight": p["embed/embedding"] if cfg.tie_embeddings else p["lm_head/kernel"].T}
    for j in range(l):
        hp, o = f"model.layers.{j}.", f"layers/{j}/"
        sd[hp + "token_mixer.qkvu_proj.weight"] = np.concatenate(
            [p[o + f"mixer/{w}/kernel"].T for w in ("wq", "wk", "wv", "wu")], axis=0)
        sd[hp + "token_mixer.out_proj.weight"] = p[o + "mixer/wo/kernel"].T
        if lrpe[j]:
            sd[hp + "token_mixer.lrpe.theta"] = p[o + "mixer/theta"].reshape(h, 1, e)
        sd[hp + "channel_mixer.l1.weight"] = p[o + "mlp/w_u/kernel"].T
        sd[hp + "channel_mixer.l2.weight"] = p[o + "mlp/w_v/kernel"].T
        sd[hp + "channel_mixer.l3.weight"] = p[o + "mlp/w_down/kernel"].T
    return hf, sd
