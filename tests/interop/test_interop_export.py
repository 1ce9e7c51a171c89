"""Weights out: every export is the inverse of its importer, reproduces the released checkpoints the
parity fixtures hold (their tensors exactly, their reference logits through a re-import), carries
the run's tokenizer, and refuses in one line what its layout cannot hold.

Round trips (ours -> theirs -> ours) compare every parameter bit for bit on random models built
with each layout's switches (one of them with scan_layers, whose stacked layers the export splits).
"""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from linscale_jax.data import tokenize
from linscale_jax.interop import export, hf_io, tokenizer_files
from linscale_jax.interop.loading import convert
from linscale_jax.models import ModelConfig, build_model

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures")
CASES = {"transnormerllm": "transnormerllm_tiny.npz", "hgrn2-official": "hgrn2_official_tiny.npz",
         "hgrn2-fla": "hgrn2_fla_tiny.npz"}
RUNTIME_ONLY = {"use_cache", "pad_token_id", "fuse_norm", "fuse_swiglu", "fuse_cross_entropy"}  # not the model
ATOL = 1e-4
forward = nnx.jit(lambda model, tokens: model(tokens))


def read_fixture(name):
    with np.load(os.path.join(FIXTURES, name)) as z:
        state = {k[len("param/"):]: z[k] for k in z.files if k.startswith("param/")}
        return json.loads(str(z["config_json"])), state, z["input_ids"], z["logits"]


@pytest.mark.parametrize("fmt", list(CASES))
def test_export_is_the_released_checkpoint(fmt):
    """fixture -> ours -> export: the reference's own tensors and config, and its logits again."""
    config, state, tokens, ref = read_fixture(CASES[fmt])
    section, model = convert(fmt, config, state)
    hf, out = export.export(fmt, model, ModelConfig.from_config(section))
    assert set(out) == set(state)
    worst = max(float(np.abs(out[k] - state[k]).max()) for k in state)
    assert worst == 0.0, worst
    assert {k: v for k, v in config.items() if k not in RUNTIME_ONLY} == \
        {k: hf[k] for k in config if k not in RUNTIME_ONLY}
    _, again = convert(fmt, hf, out)
    diff = float(np.abs(np.asarray(forward(again, jnp.asarray(tokens))) - ref).max())
    print(f"{fmt}: export == fixture tensors (max |d| {worst}); re-import max |dlogit| vs reference {diff:.1e}")
    assert diff < ATOL


def random_model(section, seed):
    """A model of `section` (scanned or not) whose every parameter is random, norm scales and
    LRPE θ included."""
    model = build_model(ModelConfig.from_config(section), rngs=nnx.Rngs(seed))
    rng = np.random.default_rng(seed)
    hf_io.set_model_params(model, {k: v + rng.standard_normal(v.shape).astype(np.float32)
                                   for k, v in hf_io.model_params(model).items()})
    return model


BASE = dict(n_layers=3, d_model=32, n_heads=2, ffn_dim=48, vocab_size=40, max_seq_len=64)
ROUND_TRIPS = {
    "transnormerllm": dict(arch="tnl", tnl=dict(gate="linear", decay_rule="alibi_layer", lrpe=True),
                           embed_scale="sqrt_d", tie_embeddings=False),
    "hgrn2-official": dict(arch="hgrn2", glu_act="silu", tie_embeddings=False, scan_layers=True),
    "hgrn2-fla": dict(arch="hgrn2", glu_act="silu", hgrn2=dict(q_scale="rsqrt_k"), mixer_norm_eps=1e-5,
                      norm_scale=True, norm_eps=1e-5, tie_embeddings=True),
    "hf-llama": dict(arch="llama", llama=dict(n_kv_heads=1, rope_theta=5e5), tie_embeddings=False),
}


@pytest.mark.parametrize("fmt", list(ROUND_TRIPS))
def test_round_trip_ours_theirs_ours(fmt):
    cfg = ModelConfig.from_config({**BASE, **ROUND_TRIPS[fmt]})
    model = random_model(cfg.to_dict(), seed=2)
    hf, state = export.export(fmt, model, cfg)
    back_section, back = convert(fmt, json.loads(json.dumps(hf)), state)  # config.json as written
    ours = export.per_layer(hf_io.model_params(model), cfg.n_layers)
    again = hf_io.model_params(back)
    assert set(ours) == set(again)
    worst = max(float(np.abs(ours[k] - again[k]).max()) for k in ours)
    print(f"{fmt}: ours -> theirs -> ours, {len(ours)} parameters, max |d| = {worst}")
    assert worst == 0.0
    b = ModelConfig.from_config(back_section)
    assert export.variant(cfg) == export.variant(b)
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim, cfg.vocab_size, cfg.tie_embeddings) == \
        (b.n_layers, b.d_model, b.n_heads, b.ffn_dim, b.vocab_size, b.tie_embeddings)


def test_fla_export_of_unscaled_norms_writes_scales_of_one():
    section = {**BASE, **ROUND_TRIPS["hgrn2-fla"], "norm_scale": False}
    model = random_model(section, seed=4)
    hf, state = export.export("hgrn2-fla", model, ModelConfig.from_config(section))
    assert np.array_equal(state["model.layers.1.attn.g_norm.weight"], np.ones(32, np.float32))
    _, back = convert("hgrn2-fla", hf, state)
    tokens = jnp.asarray(np.arange(24, dtype=np.int32).reshape(2, 12) % 40)
    np.testing.assert_allclose(np.asarray(forward(back, tokens)), np.asarray(forward(model, tokens)), atol=1e-5)


def cfg(**fields):
    return ModelConfig.from_config({**BASE, **fields})


def test_what_a_layout_cannot_hold_is_refused_naming_the_fields():
    with pytest.raises(export.ExportError, match=r"model.tnl.gate='lowrank' \(its output gate is a full-rank.*"
                       r"--config.model.tnl.gate=linear --config.model.tnl.decay_rule=alibi_layer"):
        export.check("transnormerllm", cfg(arch="tnl"))  # the paper's TNL
    with pytest.raises(export.ExportError, match=r"glu_act='none'.*hgrn2.q_scale='one'.*--to=hgrn2-official"):
        export.check("hgrn2-fla", cfg(arch="hgrn2"))
    export.check("hgrn2-official", cfg(arch="hgrn2"))  # the paper's HGRN2 is the official block
    with pytest.raises(export.ExportError, match="cosFormer2 has no released checkpoint layout"):
        export.check("hgrn2-official", cfg(arch="cosformer2"))
    with pytest.raises(export.ExportError, match="this run is llama; use --to=hf-llama"):
        export.check("transnormerllm", cfg(arch="llama"))
    with pytest.raises(export.ExportError, match="short_conv=4"):
        export.check("hgrn2-official", cfg(arch="hgrn2", short_conv=4))


TEXT = "def f(x):\n\treturn x  # ünïcödé 🙂 </s> <pad>\r\n\n"


def test_byte_tokenizer_json_encodes_as_training(tmp_path):
    import tokenizers

    from ml_collections import ConfigDict

    ids = tokenizer_files.write(str(tmp_path), ConfigDict(dict(vocab="byte")))
    assert ids == dict(eos_token_id=1, pad_token_id=0)
    tok = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    want = tokenize.get("byte").encode_batch([TEXT])[0].tolist()
    assert tok.encode(TEXT, add_special_tokens=False).ids == want
    assert tok.decode(want) == TEXT and tok.get_vocab_size() == 259
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["eos_token"] == "</s>"


def test_hf_vocabulary_is_copied(tmp_path):
    import tokenizers
    from tokenizers import models, pre_tokenizers
    from ml_collections import ConfigDict

    source = tokenizers.Tokenizer(models.WordLevel({"<pad>": 0, "<|endoftext|>": 1, "[UNK]": 2, "a": 3},
                                                   unk_token="[UNK]"))
    source.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "src.json"
    source.save(str(path))
    out = tmp_path / "out"
    out.mkdir()
    ids = tokenizer_files.write(str(out), ConfigDict(dict(vocab=f"hf:{path}")))
    assert (out / "tokenizer.json").read_bytes() == path.read_bytes()
    assert ids == dict(eos_token_id=1, pad_token_id=0)
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "<|endoftext|>"


def test_cli_exports_a_run_with_its_tokenizer_and_refuses_in_one_line(tmp_path, capsys):
    from linscale_jax.config import base_config
    from linscale_jax.interop import convert as cli
    from linscale_jax.run import checkpoint as ckpt

    config = base_config()
    config.model.update(dict(BASE, arch="hgrn2", vocab_size=259))
    model = random_model(config.model.to_dict(), seed=5)
    run = tmp_path / "run"
    ckpt.save_model(str(run), model, config, step=7)
    out = tmp_path / "official"
    assert cli.main(["--to=hgrn2-official", f"--workdir={run}", f"--out={out}"]) == 0
    hf = json.loads((out / "config.json").read_text())
    assert hf["eos_token_id"] == 1 and hf["pad_token_id"] == 0 and hf["model_type"] == "hgrn2"
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.encode(TEXT, add_special_tokens=False).ids == tokenize.get("byte").encode_batch([TEXT])[0].tolist()
    section, back = convert("hgrn2-official", hf, hf_io.read_weights(str(out)))
    ours, again = hf_io.model_params(model), hf_io.model_params(back)
    assert all(np.array_equal(ours[k], again[k]) for k in ours)
    transformers = pytest.importorskip("transformers")
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(str(out))
    assert fast.eos_token_id == 1 and fast("abc", add_special_tokens=False)["input_ids"] == [100, 101, 102]

    capsys.readouterr()
    refused = tmp_path / "fla"
    assert cli.main(["--to=hgrn2-fla", f"--workdir={run}", f"--out={refused}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ERROR: the fla HGRN2ForCausalLM layout cannot hold"), err
    assert not refused.exists()
