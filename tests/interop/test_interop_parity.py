"""Released TransNormerLLM / HGRN2 checkpoints: the converters reproduce the PyTorch references.

The fixtures in tests/fixtures/ were produced by running the original PyTorch code outside this
repository on tiny random configs (fp32, pure-PyTorch paths); see tests/fixtures/README.md.
Tolerance: max |Δlogit| < 1e-4 in fp32 (logits reach |x| ≈ 14).
"""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from linscale_jax.interop import hf_io
from linscale_jax.interop.loading import convert

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures")
ATOL = 1e-4
CASES = {
    "transnormerllm": "transnormerllm_tiny.npz",
    "hgrn2-official": "hgrn2_official_tiny.npz",
    "hgrn2-fla": "hgrn2_fla_tiny.npz",
}


forward = nnx.jit(lambda model, tokens: model(tokens))
extend = nnx.jit(lambda model, tokens, state: model.extend(tokens, state))


def read_fixture(name):
    with np.load(os.path.join(FIXTURES, name)) as z:
        config = json.loads(str(z["config_json"]))
        state = {k[len("param/"):]: z[k] for k in z.files if k.startswith("param/")}
        return config, state, z["input_ids"], z["logits"]


@pytest.fixture(scope="module", params=list(CASES))
def converted(request):
    fmt = request.param
    config, state, tokens, logits = read_fixture(CASES[fmt])
    section, model = convert(fmt, config, state)
    return fmt, section, model, tokens, logits


def test_parallel_forward_matches_reference(converted):
    fmt, section, model, tokens, ref = converted
    ours = np.asarray(forward(model, jnp.asarray(tokens)))
    diff = np.abs(ours - ref).max()
    print(f"{fmt}: max |dlogit| = {diff:.2e} (|logit| max {np.abs(ref).max():.1f})")
    assert np.abs(ref).max() > 1.0
    assert diff < ATOL


def test_recurrent_decoding_matches_reference(converted):
    """Prefill half, then one token at a time: the released variants' switches hold in decoding."""
    fmt, section, model, tokens, ref = converted
    b, t = tokens.shape
    state = model.init_state(b, t)
    half = t // 2
    logits, state = extend(model, jnp.asarray(tokens[:, :half]), state)
    outs = [np.asarray(logits)]
    for i in range(half, t):
        logits, state = extend(model, jnp.asarray(tokens[:, i:i + 1]), state)
        outs.append(np.asarray(logits))
    diff = np.abs(np.concatenate(outs, axis=1) - ref).max()
    print(f"{fmt} decode: max |dlogit| = {diff:.2e}")
    assert diff < ATOL


def test_switches_matter():
    """Each released-variant switch changes the logits: a converter that silently dropped one
    would not pass the parity test above."""
    config, state, tokens, ref = read_fixture(CASES["hgrn2-fla"])
    section, model = convert("hgrn2-fla", config, state)
    values = hf_io.model_params(model)
    from linscale_jax.interop.loading import build

    # q scale and the output-norm eps act only through the eps of the norm that follows, and still
    # move the logits by ~3e-3 (30x the tolerance) on this fixture.
    for change in (dict(hgrn2=dict(q_scale="one")), dict(glu_act="none"), dict(mixer_norm_eps=1e-6)):
        other = build({**section, **change}, values)
        diff = np.abs(np.asarray(forward(other, jnp.asarray(tokens))) - ref).max()
        assert diff > 10 * ATOL, (change, diff)


def test_cli_writes_a_checkpoint_eval_can_load(tmp_path):
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.interop import convert as cli

    config, state, tokens, ref = read_fixture(CASES["hgrn2-fla"])
    src = tmp_path / "hf"
    hf_io.write_checkpoint(str(src), config, state)
    cli.main(["--from=hgrn2-fla", f"--src={src}", f"--workdir={tmp_path / 'work'}"])
    model, cfg, meta = ckpt.load_model(str(tmp_path / "work"))
    assert cfg.model.arch == "hgrn2" and cfg.model.hgrn2.q_scale == "rsqrt_k"
    assert meta["n_params"] > 0
    assert np.abs(np.asarray(forward(model, jnp.asarray(tokens))) - ref).max() < ATOL


def test_unsupported_variants_are_named():
    config, state, _, _ = read_fixture(CASES["hgrn2-fla"])
    with pytest.raises(ValueError, match="use_short_conv"):
        convert("hgrn2-fla", {**config, "use_short_conv": True}, state)
    config, state, _, _ = read_fixture(CASES["transnormerllm"])
    with pytest.raises(ValueError, match="norm_type"):
        convert("transnormerllm", {**config, "norm_type": "layernorm"}, state)
    with pytest.raises(KeyError, match="qkvu_proj"):
        convert("transnormerllm", config, {k: v for k, v in state.items() if "qkvu" not in k})
