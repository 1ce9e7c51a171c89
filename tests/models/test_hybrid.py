"""Hybrid stacks (model.layers, e.g. "tnl*3,llama"): the forward equals a layer-by-layer composition of
the pure models' blocks (each layer its own arch's block and per-layer input: TNL's decays, HGRN2's
lower bounds), decoding token by token equals the forward, the accounting equals the parameter tree
and the pure models' terms, the KV cache counts only softmax layers, and the trainer saves, resumes
and evaluates one."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from linscale_jax.models import ModelConfig, accounting, build_model, llama, variant_change

V, B, T = 40, 2, 16
# (primary arch, pattern, depth): truncated periods, the softmax layer first, the last of a group,
# two linear archs (cosFormer2's TPE as the embedding stage, gdn's delta rule), HGRN2's lower bounds
CASES = [("tnl", "tnl*3,llama", 6), ("hgrn2", "llama,hgrn2*2", 5), ("cosformer2", "cosformer2,gdn", 4)]


def base(**kw):
    return dict(dict(n_layers=4, d_model=32, n_heads=2, ffn_dim=64, vocab_size=V, max_seq_len=64,
                     impl="xla", chunk_size=8, init_std=0.1), **kw)


@functools.lru_cache(maxsize=None)
def hybrid_and_pure(arch, pattern, depth):
    """The hybrid built from the pure models' parameters: layer j is layer i of its arch's pure
    model (i counting that arch's layers), the stack parameters (HGRN2's Γ) and the embedding
    stage, final norm and head are the pure models'."""
    cfg = ModelConfig(**base(arch=arch, layers=pattern, n_layers=depth))
    counts = accounting.layer_counts(cfg)
    pure = {a: build_model(cfg.pure(a).replace(n_layers=n), seed=k) for k, (a, n) in enumerate(counts.items())}
    hybrid = build_model(cfg, seed=99)
    state = nnx.to_pure_dict(nnx.state(hybrid, nnx.Param))
    seen = dict.fromkeys(counts, 0)
    for j, a in enumerate(cfg.layer_archs):
        state["layers"][j] = nnx.to_pure_dict(nnx.state(pure[a].layers[seen[a]], nnx.Param))
        seen[a] += 1
    own = nnx.to_pure_dict(nnx.state(pure[arch], nnx.Param))
    for key in own:
        if key != "layers" and key in state:
            state[key] = own[key]
    if "hgrn2" in counts:
        state["hgrn2_lower_bounds"] = nnx.to_pure_dict(nnx.state(pure["hgrn2"], nnx.Param))["lower_bounds"]
    nnx.update(hybrid, state)
    return cfg, hybrid, pure


def tokens(seed, shape=(B, T)):
    return jax.random.randint(jax.random.key(seed), shape, 0, V, dtype=jnp.int32)


def composed(cfg, pure, toks, segment_ids):
    """The pure models' blocks, one after another in the pattern's order."""
    from linscale_jax.models.decoder import segment_positions

    positions = segment_positions(segment_ids)
    primary = pure[cfg.arch]
    x, _ = primary.embed_tokens(toks, positions, segment_ids, None)
    extras = {a: m.layer_extras()[a] for a, m in pure.items()}
    seen = dict.fromkeys(pure, 0)
    for a in cfg.layer_archs:
        extra = jax.tree.map(lambda e, i=seen[a]: e[i], extras[a])
        x = pure[a].layers[seen[a]](x, positions, segment_ids, None, extra)[0]
        seen[a] += 1
    return primary.logits(primary.final_norm(x))


@pytest.mark.parametrize("arch,pattern,depth", CASES)
def test_forward_equals_the_pure_models_blocks_composed(arch, pattern, depth):
    cfg, hybrid, pure = hybrid_and_pure(arch, pattern, depth)
    toks = tokens(1)
    seg = jnp.asarray([[1] * 6 + [2] * 10, [1] * 11 + [2] * 5], jnp.int32)  # packed documents
    got = nnx.jit(lambda m, t, s: m(t, s))(hybrid, toks, seg)
    want = nnx.jit(lambda t, s: composed(cfg, pure, t, s))(toks, seg)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # each layer is its own arch's block: llama's RMSNorm scales and SwiGLU, the linear SimpleRMSNorm
    for block, a in zip(hybrid.layers, cfg.layer_archs):
        assert (type(block.mixer), type(block.norm1).__name__, block.mlp.activation) == (
            type(pure[a].layers[0].mixer), "RMSNorm" if a == "llama" else "SimpleRMSNorm", a == "llama")


@pytest.mark.parametrize("arch,pattern,depth", CASES)
def test_decoding_token_by_token_equals_the_forward(arch, pattern, depth):
    cfg, hybrid, _ = hybrid_and_pure(arch, pattern, depth)
    toks = tokens(2)
    full = nnx.jit(lambda m, t: m(t))(hybrid, toks)
    extend = nnx.jit(lambda m, t, s: m.extend(t, s))
    state = hybrid.init_state(B, T)
    kinds = [set(c) if isinstance(c, dict) else "state" for c in state["layers"]]
    assert [k == {"k", "v"} for k in kinds] == [a == "llama" for a in cfg.layer_archs]  # KV / state
    out, state = extend(hybrid, toks[:, :5], state)
    outs = [out]
    for i in range(5, T):
        step, state = extend(hybrid, toks[:, i:i + 1], state)
        outs.append(step)
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full, rtol=1e-5, atol=2e-5)
    if "llama" in cfg.archs:  # the softmax layers' KV caches bound decoding; linear states do not
        with pytest.raises(ValueError, match="KV cache holds 16 tokens"):
            hybrid.extend(toks[:, :1], state)
    else:
        assert hybrid.extend(toks[:, :1], state)[0].shape == (B, 1, V)


@pytest.mark.parametrize("arch,pattern,depth", CASES)
def test_accounting_matches_the_tree_and_the_pure_models(arch, pattern, depth):
    cfg, hybrid, pure = hybrid_and_pure(arch, pattern, depth)
    params = nnx.state(hybrid, nnx.Param)
    total = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    counts = accounting.param_counts(cfg)
    assert counts["total"] == total and counts["embedding"] == V * 32
    # the layers are the pure models' layers; the model-level parts are model.arch's (and Γ)
    own = lambda m: sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(m, nnx.Param)))  # noqa: E731
    layers = sum(own(pure[a].layers[0]) for a in cfg.layer_archs)
    rest = own(pure[arch]) - sum(own(b) for b in pure[arch].layers) + sum(
        own(m) - sum(own(b) for b in m.layers) - V * 32 - 32 * (a == "llama")  # its final norm
        for a, m in pure.items() if a != arch)
    assert total == layers + rest
    # Table-1 N and C/D and the exact FLOPs: the pure models' per-layer terms, model.arch's once terms
    n = 16
    parts = {a: m.cfg for a, m in pure.items()}
    once = {a: accounting.paper_params(c) - c.n_layers * (accounting.paper_params(c.replace(n_layers=2))
                                                          - accounting.paper_params(c.replace(n_layers=1)))
            for a, c in parts.items()}
    assert accounting.paper_params(cfg) == sum(accounting.paper_params(c) for c in parts.values()) \
        - sum(once.values()) + once[arch]
    assert accounting.paper_flops_per_token(cfg, n) == pytest.approx(
        sum(accounting.paper_flops_per_token(c, n) for c in parts.values()))
    head = 2 * 32 * V  # each pure model counts its LM head once
    tpe = {a: accounting.forward_flops_per_token(c, n) - c.n_layers * (
        accounting.forward_flops_per_token(c.replace(n_layers=2), n)
        - accounting.forward_flops_per_token(c.replace(n_layers=1), n)) - head for a, c in parts.items()}
    assert accounting.forward_flops_per_token(cfg, n) == pytest.approx(
        sum(accounting.forward_flops_per_token(c, n) - head - tpe[a] for a, c in parts.items()) + head + tpe[arch])


def test_exact_flops_agree_with_xla_cost_analysis():
    """A hybrid's exact forward count (its softmax layer's attention term included) against XLA's
    count of the compiled forward, as tests/models/test_accounting.py does for the pure models."""
    t = 64
    cfg = ModelConfig(**base(arch="tnl", layers="tnl,llama", n_layers=2, d_model=64, ffn_dim=192,
                             vocab_size=264, max_seq_len=128, chunk_size=16))
    graphdef, state = nnx.split(nnx.eval_shape(lambda: build_model(cfg, nnx.Rngs(0))))
    fwd = jax.jit(lambda st, x: nnx.merge(graphdef, st)(x))
    cost = fwd.lower(state, jax.ShapeDtypeStruct((1, t), jnp.int32)).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    blk = llama.query_block(t)  # the llama layer's formed (query, key) pairs beyond the causal half
    seen = sum(blk * min(i + blk, t) for i in range(0, t, blk))
    ours = accounting.forward_flops_per_token(cfg, t) * t + 2 * 2 * 64 * (seen - t * (t + 1) / 2)
    assert 0.99 < cost["flops"] / ours < 1.08, cost["flops"] / ours


def test_kv_cache_bytes_and_state_per_layer():
    hybrid = ModelConfig(**base(arch="tnl", layers="tnl*3,llama", n_layers=8))
    pure_llama = ModelConfig(**base(arch="llama", n_layers=8))
    assert accounting.kv_cache_bytes_per_token(pure_llama) == 8 * 2 * 32 * 4  # l·2·d·float32
    assert accounting.kv_cache_bytes_per_token(hybrid) == 2 * 2 * 32 * 4  # its 2 llama layers
    assert accounting.kv_cache_bytes_per_token(ModelConfig(**base(arch="tnl"))) == 0
    gqa = hybrid.replace(llama=dict(n_kv_heads=1), dtype="bfloat16")
    assert accounting.kv_cache_bytes_per_token(gqa) == 2 * 2 * 16 * 2  # one kv head, bf16
    # per layer: 6 TNL states h·e² and 2 KV caches of 2·d·n, averaged
    assert accounting.state_floats_per_layer(hybrid, 100) == (6 * 2 * 16 * 16 + 2 * 2 * 32 * 100) / 8


def test_labels_options_and_refusals():
    assert variant_change("tnl", "hybrid", "3:1") == {"layers": "tnl*3,llama"}
    assert variant_change("tnl", "hybrid", "3:1:first") == {"layers": "llama,tnl*3"}
    assert variant_change("gdn", "hybrid", "6:1:hgrn2") == {"layers": "gdn*6,hgrn2"}
    cfg = ModelConfig(**base(arch="tnl", layers="tnl*3,llama", norm_scale=True, llama=dict(n_kv_heads=1),
                             tnl=dict(decay_rule="alibi_layer")))
    assert cfg.layer_archs == ("tnl", "tnl", "tnl", "llama") and cfg.archs == ("tnl", "llama")
    # the linear block's switches reach the linear layers only; each arch's options its own layers
    assert cfg.pure("llama").norm_scale is False and cfg.pure("tnl").norm_scale is True
    assert cfg.pure("llama").llama.n_kv_heads == 1 and cfg.pure("tnl").llama.n_kv_heads == 0
    cases = [
        (dict(arch="tnl", layers="tnl*3,llama", n_layers=2), r"model.layers='tnl\*3,llama' is longer than model.n_layers=2"),
        (dict(arch="hgrn2", layers="tnl*3,llama"), r"has no hgrn2 layer, and model.arch=hgrn2 gives the model"),
        (dict(arch="tnl", layers="tnl*0,llama"), r"'tnl\*0' must be <arch> or <arch>\*<count >= 1>"),
        (dict(arch="tnl", layers="tnl,mamba"), r"unknown architecture 'mamba'"),
        (dict(arch="tnl", layers="tnl,llama", scan_layers=True), r"scan_layers stacks identical layers"),
        (dict(arch="tnl", layers="tnl*3", cosformer2=dict(tpe="none")), r"model.cosformer2.tpe='none' applies to cosformer2"),
    ]
    for kw, match in cases:
        with pytest.raises(ValueError, match=match):
            ModelConfig(**base(**kw))
    from linscale_jax.interop import export  # a layout holds one arch's layers: a hybrid is refused
    with pytest.raises(export.ExportError, match=r"^a hybrid stack \(model.layers='tnl\*3,llama'\) has no released"):
        export.check("transnormerllm", cfg)


def test_a_hybrid_trains_resumes_and_evaluates(tmp_path):
    """hgrn2 with llama (a stack parameter, hgrn2_lower_bounds; both blocks) through the trainer:
    sharded parameters on the trainer's mesh, checkpoints, resume, load_model and eval. ~25 s."""
    from helpers.train import tiny_config

    from linscale_jax.eval import runner
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.train import loop as trainer

    c = tiny_config("hgrn2+hybrid=1:1", steps=2)
    c.model.n_layers = 2
    c.checkpoint.update(every_steps=2)
    assert c.model.layers == "hgrn2,llama"
    trainer.train(c, tmp_path)
    c.train.steps = 4
    out = trainer.train(c, tmp_path)
    assert out["step"] == 4 and sorted(out["losses"]) == [3, 4]
    model, _, meta = ckpt.load_model(str(tmp_path), 4)
    assert model.hgrn2_lower_bounds.shape == (1, 64) and meta["config"]["model"]["layers"] == "hgrn2,llama"
    rows = runner.evaluate(str(tmp_path), tasks="val_loss", ctx_kwargs=dict(val_batches=1), log=lambda *_: None)
    assert [r["step"] for r in rows] == [2, 4] and all(math.isfinite(r["val_loss"]) for r in rows)
