"""The architecture registry: a fifth architecture defined in one file, tests/models/plainlin.py -- a
plain causal linear attention (no gate, no decay, no positional encoding) -- is discovered when that
file sits in linscale_jax/models/ (shown in a copy of the packages, in a fresh interpreter: it is
registered, sized by the ladder and linear, i.e. softmax_block=False), and describe, the trainer and
eval accept it with no other file changed.
Also: the paper's four are the registry's keys in the paper's order whatever order they register
in, and an unknown arch is a clear error everywhere it is named.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers.train import tiny_config

from linscale_jax.eval import runner
from linscale_jax.fit import paper
from linscale_jax.fit.table import FitError
from linscale_jax.models import accounting
from linscale_jax.models import describe
from linscale_jax.train import loop as trainer
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.config import ARCHS
from linscale_jax.models import ModelConfig, build_model, registry, sizes

REPO = Path(__file__).resolve().parents[2]
PLAINLIN = Path(__file__).with_name("plainlin.py")  # the fifth architecture's one file
PACKAGES = ("linscale_jax", "kernels_pallas")


@pytest.fixture(scope="module")
def plain():
    """Import plainlin.py, which registers it (as the package's discovery would); unregister after."""
    spec = importlib.util.spec_from_file_location("plainlin_under_test", PLAINLIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module.PLAIN
    registry.unregister(module.PLAIN.name)


def test_fifth_arch_module_is_discovered_in_the_models_package(tmp_path):
    """Copy the packages, drop plainlin.py into linscale_jax/models/ (the one file a fifth linear
    architecture adds), and in a fresh interpreter on that copy: the registry has it after the
    paper's four, the size ladder and Table-1 sizes cover it, and it counts as linear."""
    root = tmp_path / "repo"
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PLAINLIN, root / "linscale_jax" / "models" / "plainlin.py")
    probe = (
        "import json, sys\n"
        "from linscale_jax.models import registry, sizes\n"
        "import linscale_jax.models.plainlin as m\n"
        "print(json.dumps(dict(archs=list(registry.ARCHS), file=m.__file__,\n"
        "    linear=[a for a in registry.ARCHS if not registry.get(a).softmax_block],\n"
        "    ladder=sizes.ladder_model('plainlin', 'd64')['n_layers'])))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(got["file"]).resolve() == (root / "linscale_jax/models/plainlin.py").resolve()
    assert got["archs"] == ["llama", "tnl", "hgrn2", "cosformer2", "plainlin"]
    assert got["linear"] == ["tnl", "hgrn2", "cosformer2", "plainlin"]
    assert got["ladder"] == sizes.LADDER["d64"][0]


def test_discover_imports_only_registering_modules_and_archs_keep_the_paper_order(tmp_path):
    """registry.discover imports a package's modules that call registry.register (not helpers, not
    _private ones), and ARCHS puts the paper's four first in the paper's order even when a new
    architecture registers before them."""
    pkg = tmp_path / "archpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("raise AssertionError('helpers are not imported')\n")
    (pkg / "_private.py").write_text("registry.register(None)  # skipped: private\n")
    (pkg / "aaa.py").write_text(PLAINLIN.read_text())  # sorts (and registers) before the paper's
    sys.path.insert(0, str(tmp_path))
    try:
        found = registry.discover("archpkg", [str(pkg)])
        assert found == ["archpkg.aaa"]
        assert tuple(ARCHS) == ("llama", "tnl", "hgrn2", "cosformer2", "plainlin")
    finally:
        registry.unregister("plainlin")
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "archpkg" or n.startswith("archpkg.")]:
            del sys.modules[name]
    assert "plainlin" not in ARCHS


def test_paper_four_are_the_registry_keys_in_order():
    assert tuple(ARCHS) == ("llama", "tnl", "hgrn2", "cosformer2")
    assert ARCHS == ("llama", "tnl", "hgrn2", "cosformer2") and "plainlin" not in ARCHS
    for name in ARCHS:
        spec = registry.get(name)
        assert spec.name == name and build_model(ModelConfig(arch=name, d_model=16, n_heads=2,
                                                             ffn_dim=32, n_layers=1, vocab_size=8)
                                                 ).layers[0].mixer.__class__ is spec.mixer


def test_unknown_arch_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown architecture 'gpt'.*register"):
        registry.get("gpt")
    with pytest.raises(ValueError, match=r"model.arch='gpt' is not supported; choose one of"):
        ModelConfig(arch="gpt")
    with pytest.raises(ValueError, match="unknown architecture 'gpt'"):
        sizes.paper_model("gpt", "70m")
    with pytest.raises(ValueError, match="'<arch>-<size>'"):
        sizes.parse_name("gpt-d64")
    with pytest.raises(FitError, match=r"no fit for arch 'plainlin' \(Table 3 covers llama, tnl"):
        paper.law("plainlin", "L_C")  # fit/ holds the paper's published fits: data keyed by name
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.ArchSpec(name="tnl", mixer=nnx.Module,
                                            paper_params_extra=lambda l, d, h: 0,
                                            paper_flops_x=lambda d, h, n: 0.0,
                                            layer_flops=lambda cfg, n, chunk: 0.0))


def test_fifth_arch_registers_and_describe_accepts_it(plain):
    assert ARCHS[-1] == "plainlin" and "plainlin" in ARCHS and len(ARCHS) == 5  # live keys
    model_cfg = ModelConfig.from_config(sizes.ladder_model("plainlin", "d64"))
    row = describe.describe_row(model_cfg, 512)
    l, d, h, e, g, v = 4, 64, 4, 16, model_cfg.ffn_dim, 264
    assert (row["arch"], row["n_layers"], row["d_model"], row["n_heads"]) == ("plainlin", l, d, h)
    # the real parameter tree is the registered mixer's: q, k, v, o and the GLU, parameter-free norms
    assert row["params_non_embedding"] == l * (4 * d * d + 3 * d * g)
    assert row["params_embedding"] == v * d
    assert row["paper_params"] == 12 * l * d * d
    assert row["paper_flops_per_token"] == pytest.approx(72 * l * d * d * (1 + 1 / (3 * h) + 5 / (18 * d)))
    c = min(model_cfg.resolved_chunk_size, 512)
    per_layer = 8 * d * d + 6 * d * g + h * (2 * c * 2 * e + 4 * e * e)
    assert row["flops_per_token_exact"] == pytest.approx(3 * (l * per_layer + 2 * d * v))
    assert "decay_per_layer" not in row  # TNL's extra only
    table = describe.format_table([row])
    assert "plainlin" in table.splitlines()[2]
    paper = describe.paper_rows(2048)
    assert [r["arch"] for r in paper].count("plainlin") == len(sizes.PAPER_SIZES)


def test_fifth_arch_mixer_is_plain_causal_linear_attention(plain):
    """The registered mixer inside the built model equals, by hand with its own weights,
    o_t = Σ_{s<=t} (φ(q_t)·φ(k_s)) v_s per head, φ = elu + 1, then SimpleRMSNorm and W_o."""
    cfg = ModelConfig(arch="plainlin", d_model=16, n_heads=2, ffn_dim=32, n_layers=1, vocab_size=8,
                      chunk_size=4, impl="xla")
    mixer = build_model(cfg, seed=1).layers[0].mixer
    assert isinstance(mixer, plain.mixer)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 12, 16)), jnp.float32)
    pos = jnp.broadcast_to(jnp.arange(12), (2, 12))
    y, _ = mixer(x, positions=pos, segment_ids=None, cache=None, extra=None)

    w = {n: np.asarray(getattr(mixer, n).kernel[...], np.float64) for n in ("wq", "wk", "wv", "wo")}
    xs = np.asarray(x, np.float64)
    phi = lambda a: np.where(a > 0, a, np.expm1(a)) + 1  # noqa: E731
    q, k = (phi(xs @ w[n]).reshape(2, 12, 2, 8) for n in ("wq", "wk"))
    v = (xs @ w["wv"]).reshape(2, 12, 2, 8)
    scores = np.einsum("bthe,bshe->bhts", q, k) * np.tril(np.ones((12, 12)))
    o = np.einsum("bhts,bshf->bthf", scores, v).reshape(2, 12, 16)
    o = o / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + cfg.out_norm_eps)
    np.testing.assert_allclose(np.asarray(y), o @ w["wo"], rtol=2e-4, atol=2e-5)


def test_fifth_arch_trains_and_evaluates(plain, tmp_path):
    c = tiny_config("plainlin", steps=4)
    c.checkpoint.update(every_steps=4)
    s = trainer.train(c, tmp_path)
    losses = [s["losses"][k] for k in range(1, 5)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses
    meta = ckpt.load_metadata(tmp_path, 4)
    assert meta["arch"] == "plainlin" and meta["config"]["model"]["arch"] == "plainlin"
    model_cfg = ModelConfig.from_config(c.model)
    assert meta["flops_exact"] == pytest.approx(
        accounting.flops_per_token_exact(model_cfg, c.train.seq_len) * 4 * 4 * 32)
    model, _, _ = ckpt.load_model(str(tmp_path), 4)
    assert isinstance(model.layers[0].mixer, plain.mixer)
    rows = runner.evaluate(str(tmp_path), tasks="val_loss", ctx_kwargs=dict(val_batches=1),
                           log=lambda *_: None)
    assert [r["step"] for r in rows] == [4]
    assert rows[0]["arch"] == "plainlin" and math.isfinite(rows[0]["val_loss"])
    assert rows[0]["n_params"] == meta["n_params"]


def test_fifth_arch_decodes_from_its_recurrent_state(plain):
    """Prefill + one-token steps through the registered mixer's cache equal the parallel forward."""
    cfg = ModelConfig(arch="plainlin", d_model=16, n_heads=2, ffn_dim=32, n_layers=2, vocab_size=11,
                      chunk_size=4, max_seq_len=16)
    model = build_model(cfg, seed=2)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 11, (2, 10)), jnp.int32)
    full = nnx.jit(lambda m, x: m(x))(model, tokens)
    extend = nnx.jit(lambda m, x, s: m.extend(x, s))  # compiled once per length: 6, then 1
    state = model.init_state(2)
    first, state = extend(model, tokens[:, :6], state)
    steps = [first]
    for t in range(6, 10):
        out, state = extend(model, tokens[:, t:t + 1], state)
        steps.append(out)
    np.testing.assert_allclose(np.asarray(jnp.concatenate(steps, 1)), np.asarray(full),
                               rtol=1e-4, atol=1e-4)


def test_state_floats_match_the_decoding_cache():
    """ArchSpec.state_floats (the formula each arch module states) equals the floats of one layer's
    init_cache: h·e·e for TNL and HGRN2, h·2e·e for cosFormer2 (and TNL with LRPE), 2·kv·e·n for
    LLaMA's KV cache."""
    for arch, extra in (("llama", {}), ("llama", dict(llama=dict(n_kv_heads=2))), ("tnl", {}),
                        ("tnl", dict(tnl=dict(lrpe=True))), ("hgrn2", {}), ("cosformer2", {})):
        cfg = ModelConfig(arch=arch, d_model=32, n_heads=4, ffn_dim=32, n_layers=2, vocab_size=8,
                          **extra)
        assert registry.get(arch).state_floats(cfg, 24) == registry.cache_floats(cfg, 24)
    cfg = ModelConfig(arch="hgrn2", d_model=64, n_heads=4, ffn_dim=32, n_layers=2, vocab_size=8)
    assert registry.get("hgrn2").state_floats(cfg, 1) == 64 * 16  # d·e
    assert registry.get("llama").state_floats(cfg.replace(arch="llama"), 10) == 2 * 64 * 10


def test_fifth_arch_state_floats_default_reads_its_cache(plain):
    cfg = ModelConfig(arch="plainlin", d_model=32, n_heads=2, ffn_dim=32, n_layers=1, vocab_size=8)
    assert registry.get("plainlin").state_floats(cfg, 7) == 2 * 16 * 16
def test_linear_archs_come_from_the_registry_and_a_fifth_is_judged_by_the_study(plain):
    """registry.linear_archs() (softmax_block=False) decides which archs the study judges against
    the baseline: the fifth architecture above appears in study.verdicts' finding 2."""
    from linscale_jax.fit.synthetic_study import study_table
    from linscale_jax.contract import BASELINE_ARCH
    from linscale_jax.study.scaling import verdicts

    name = plain.name
    assert registry.linear_archs() == ("tnl", "hgrn2", "cosformer2", name)
    t = study_table({BASELINE_ARCH: 0.0, name: 0.3}, ckpt_sd=0.005, run_sd=0.01, points=4, seed=0)
    res = verdicts.judge_all({"val_loss": t}, n_boot=20, holdout=False)
    row = res["findings"]["equal_compute"]["archs"][name]
    assert row["verdict"] == "worse" and row["diff"] == pytest.approx(0.3, abs=0.05)
    assert res["findings"]["equal_compute"]["verdict"] == "not reproduced"
