"""Hugging Face LlamaForCausalLM <-> linscale_jax llama: logits parity in fp32, both directions.

torch and transformers are test-only requirements; the HF model is built here, randomly, on the CPU.
"""

import json
import os

import numpy as np
import pytest

import jax.numpy as jnp
from flax import nnx

from linscale_jax.interop import export, hf_io, hf_llama
from linscale_jax.interop.loading import load

torch = transformers = None  # imported when this module's tests run, not at collection (both
# xdist workers collect every module; torch + transformers cost ~3.5 s CPU to import)


@pytest.fixture(autouse=True, scope="module")
def _torch_and_transformers():
    global torch, transformers
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

ATOL = 1e-4  # fp32, logits of magnitude ~5


def hf_llama_model(seed, *, kv_heads, tied, theta=10000.0):
    config = transformers.LlamaConfig(
        vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
        rms_norm_eps=1e-5, tie_word_embeddings=tied,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():  # O(1) logits; norm scales away from 1 so a swapped norm shows
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif "embed" in name or "lm_head" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


# jitted: one compile per model instead of one per operation (eager)
forward = nnx.jit(lambda model, tokens: model(tokens))
extend = nnx.jit(lambda model, tokens, state: model.extend(tokens, state))


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.as_tensor(np.asarray(tokens), dtype=torch.long)).logits.numpy()


TOKENS = np.random.default_rng(0).integers(0, 61, size=(2, 13)).astype(np.int32)


@pytest.mark.parametrize("kv_heads,tied,theta", [(4, True, 10000.0), (2, False, 500000.0)])
def test_hf_to_ours(tmp_path, kv_heads, tied, theta):
    hf = hf_llama_model(0, kv_heads=kv_heads, tied=tied, theta=theta)
    hf.save_pretrained(tmp_path)
    section, model = load("hf-llama", str(tmp_path))
    assert section["llama"]["n_kv_heads"] == kv_heads and section["tie_embeddings"] == tied
    assert section["llama"]["rope_theta"] == theta
    ours = np.asarray(forward(model, jnp.asarray(TOKENS)))
    ref = hf_logits(hf, TOKENS)
    diff = np.abs(ours - ref).max()
    print(f"hf-llama -> ours (kv={kv_heads}, tied={tied}): max |dlogit| = {diff:.2e}")
    assert np.abs(ref).max() > 1.0
    assert diff < ATOL
    if kv_heads < 4:  # grouped-query KV cache: prefill + one-token steps reproduce the HF logits
        state = model.init_state(2, TOKENS.shape[1])
        logits, state = extend(model, jnp.asarray(TOKENS[:, :9]), state)
        outs = [np.asarray(logits)]
        for i in range(9, TOKENS.shape[1]):
            logits, state = extend(model, jnp.asarray(TOKENS[:, i:i + 1]), state)
            outs.append(np.asarray(logits))
        assert np.abs(np.concatenate(outs, axis=1) - ref).max() < ATOL


def test_ours_to_hf(tmp_path):
    from linscale_jax.interop.loading import build
    from linscale_jax.models import ModelConfig, build_model

    section = dict(arch="llama", n_layers=2, d_model=32, n_heads=4, ffn_dim=48, vocab_size=61,
                   max_seq_len=64, norm_eps=1e-5, tie_embeddings=False, init_std=0.3,
                   llama=dict(n_kv_heads=2, rope_theta=10000.0))
    model = build_model(ModelConfig.from_config(section), rngs=nnx.Rngs(3))
    rng = np.random.default_rng(1)
    values = {k: (v + 0.2 * rng.standard_normal(v.shape).astype(np.float32)) if v.ndim == 1 else v
              for k, v in hf_io.model_params(model).items()}
    model = build(section, values)
    hf_config, state = export.export("hf-llama", model, ModelConfig.from_config(section))
    hf_io.write_checkpoint(str(tmp_path), hf_config, state)
    hf = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager").float().eval()
    ours = np.asarray(forward(model, jnp.asarray(TOKENS)))
    ref = hf_logits(hf, TOKENS)
    diff = np.abs(ours - ref).max()
    print(f"ours -> hf-llama: max |dlogit| = {diff:.2e}")
    assert np.abs(ref).max() > 1.0
    assert diff < ATOL


def test_cli_round_trip_and_bin_weights(tmp_path):
    """HF (.bin) -> convert --from -> Orbax workdir -> convert --to -> HF safetensors -> same logits."""
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.interop import convert

    hf = hf_llama_model(5, kv_heads=2, tied=True)
    src = tmp_path / "hf_bin"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(hf.config.to_dict()))
    torch.save(hf.state_dict(), src / "pytorch_model.bin")
    work, back = tmp_path / "work", tmp_path / "hf_back"
    convert.main(["--from=hf-llama", f"--src={src}", f"--workdir={work}"])
    assert ckpt.list_steps(str(work)) == [0]
    assert json.loads((work / "config.json").read_text())["model"]["arch"] == "llama"
    model, config, meta = ckpt.load_model(str(work))
    assert meta["source_format"] == "hf-llama"
    ref = hf_logits(hf, TOKENS)
    assert np.abs(np.asarray(forward(model, jnp.asarray(TOKENS))) - ref).max() < ATOL
    convert.main(["--to=hf-llama", f"--workdir={work}", f"--out={back}"])
    assert os.path.isfile(back / "model.safetensors")
    hf2 = transformers.LlamaForCausalLM.from_pretrained(str(back), attn_implementation="eager").float().eval()
    assert np.abs(hf_logits(hf2, TOKENS) - ref).max() < ATOL


def test_errors_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load("hf-llama", str(tmp_path))
    with pytest.raises(ValueError, match="rope scaling"):
        hf_llama.model_config(dict(num_hidden_layers=1, hidden_size=8, num_attention_heads=2,
                                   intermediate_size=8, vocab_size=5,
                                   rope_parameters={"rope_type": "llama3", "rope_theta": 5e5}))
    with pytest.raises(ValueError, match="unknown checkpoint format"):
        load("gpt2", str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        hf_io.read_weights(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="re-download"):
        hf_io.read_weights(str(tmp_path))
    with pytest.raises(KeyError, match="is --from the right format"):
        hf_io.take({"model.norm.weight": np.ones(3)}, "lm_head.weight")
