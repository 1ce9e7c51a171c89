"""describe CLI and the config files configs/paper.py, configs/ladder.py."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from linscale_jax.config import ARCHS
from linscale_jax.models import ModelConfig, sizes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = {"arch", "size", "n_layers", "d_model", "n_heads", "head_dim", "ffn_dim", "vocab_size", "params_total",
        "params_embedding", "params_non_embedding", "paper_params", "paper_flops_per_token",
        "flops_per_token_exact", "state_floats_per_layer"}
EXTRA = {"llama": {"kv_floats_per_token_per_layer"}, "tnl": {"state_floats_per_head", "decay_per_layer"},
         "hgrn2": {"state_floats_per_head", "lower_bound_per_layer"}, "cosformer2": {"state_floats_per_head"},
         "gdn": {"state_floats_per_head"}}


def load_config_file(name):
    spec = importlib.util.spec_from_file_location(f"cfg_{name}", os.path.join(ROOT, "configs", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_describe(*args):
    """The command itself, `python -m linscale_jax.models.describe ARGS`, in a fresh process."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "linscale_jax.models.describe", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def describe_in_process(capsys, monkeypatch, *args):
    """describe.main after the flag parsing app.run does (ml_collections reads the --config.*
    overrides from sys.argv), in this process: no second jax import. The command line itself is
    run_describe's job, once."""
    from absl import flags

    from linscale_jax.models import describe

    argv = ["describe", *args]
    monkeypatch.setattr(sys, "argv", argv)
    flags.FLAGS(argv)
    try:
        capsys.readouterr()
        describe.main([])
        return capsys.readouterr().out
    finally:
        flags.FLAGS.unparse_flags()


def test_describe_paper_json():
    rows = json.loads(run_describe("--paper", "--json"))
    assert len(rows) == 6 * len(ARCHS)  # the paper's 24, and gdn (beyond the paper) at its sizes
    assert all(set(r) == KEYS | EXTRA[r["arch"]] for r in rows)
    for r in rows:
        assert r["head_dim"] == 128 and r["n_heads"] * 128 == r["d_model"]
        state = {"llama": None, "tnl": 128 * 128, "hgrn2": 128 * 128, "cosformer2": 256 * 128,
                 "gdn": 128 * 256}[r["arch"]]
        conv = 3 * 4 * r["d_model"] if r["arch"] == "gdn" else 0  # gdn's width-4 convolution: 3 of (2 + 2)d
        assert r["state_floats_per_layer"] == (None if state is None else state * r["n_heads"] + conv)
        if r["arch"] == "llama":
            assert r["kv_floats_per_token_per_layer"] == 2 * r["d_model"]
        if r["arch"] == "tnl":
            lam = r["decay_per_layer"]
            assert len(lam) == r["n_layers"] and all(len(x) == r["n_heads"] for x in lam)
            assert all(x == 1 for x in np.array(lam)[:, 0]) and all(0 < x < 1 for x in lam[0][1:])
            assert lam[0][1] < lam[1][1] < lam[-1][1]
        if r["arch"] == "hgrn2":
            assert r["lower_bound_per_layer"][0] == 0 and abs(r["lower_bound_per_layer"][-1]
                                                               - (1 - 1 / r["n_layers"])) < 1e-6
    assert {(r["arch"], r["size"]) for r in rows} == {(a, s) for a in ARCHS for s in sizes.PAPER_SIZES}
    for r in rows:
        assert r["params_total"] == r["params_embedding"] + r["params_non_embedding"]
        assert r["params_embedding"] == r["vocab_size"] * r["d_model"]
        assert 0.9 < r["paper_params"] / r["params_non_embedding"] <= 1.0


def test_describe_ladder_json_reports_head_dim_and_decays(capsys, monkeypatch):
    (row,) = json.loads(describe_in_process(capsys, monkeypatch, f"--config={ROOT}/configs/ladder.py:tnl-d64", "--json"))
    assert (row["n_heads"], row["head_dim"], row["n_layers"]) == (4, 16, 4)
    assert (row["state_floats_per_layer"], row["state_floats_per_head"]) == (4 * 256, 256)
    lam = np.array(row["decay_per_layer"])  # paper rule: exp(-(8i/h)(1 - j/l))
    np.testing.assert_allclose(lam[:, 0], 1.0)
    np.testing.assert_allclose(lam[:, 1], np.exp(-2 * (1 - np.arange(4) / 4)), atol=1e-6)
    np.testing.assert_allclose(lam[0], np.exp(-2.0 * np.arange(4)), atol=1e-6)


def test_describe_default_is_the_ladder(capsys, monkeypatch):
    rows = json.loads(describe_in_process(capsys, monkeypatch, "--json"))
    assert [(r["arch"], r["size"]) for r in rows] == [(a, s) for a in ARCHS for s in sizes.LADDER]
    for r in rows:
        depth = sizes.LADDER[r["size"]][0]
        assert r["head_dim"] == 16 and r["n_layers"] == depth and r["vocab_size"] == 264
        assert depth >= 4 or r["size"].endswith(f"l{depth}")  # a shallow rung names its depth
        if r["arch"] != "llama":
            assert r["state_floats_per_head"] >= 256
    hgrn2 = next(r for r in rows if (r["arch"], r["size"]) == ("hgrn2", "d64"))
    assert hgrn2["lower_bound_per_layer"] == [0.0, 0.25, 0.5, 0.75]


def test_describe_one_config_with_override(capsys, monkeypatch):
    out = describe_in_process(capsys, monkeypatch, f"--config={ROOT}/configs/paper.py:tnl-410m",
                              "--config.model.n_layers=2")
    header, rule, row = out.strip().splitlines()
    assert header.split()[:4] == ["arch", "size", "l", "d"]
    assert row.split()[:4] == ["tnl", "410m", "2", "1024"]


def test_paper_config_file():
    paper = load_config_file("paper")
    c = paper.get_config("hgrn2-1b-d1792l24")
    assert (c.model.arch, c.model.n_layers, c.model.d_model, c.model.n_heads) == ("hgrn2", 24, 1792, 14)
    assert (c.train.seq_len, c.train.batch_size, c.optim.lr, c.optim.weight_decay) == (8192, 480, 3e-4, 0.1)
    assert c.train.steps * 8192 * 480 >= 300e9 and c.data.vocab == "cl100k_base"
    assert len(paper.names()) == 4 * 9
    for name in paper.names():
        ModelConfig.from_config(paper.get_config(name).model)
    with pytest.raises(ValueError, match="unknown paper size '5b'.*70m"):
        paper.get_config("tnl-5b")
    with pytest.raises(ValueError, match="arch one of"):
        paper.get_config("mamba-1b")


def test_ladder_config_file():
    ladder = load_config_file("ladder")
    for name in sizes.LADDER:
        cfg = ModelConfig.from_config(ladder.get_config(f"cosformer2-{name}").model)
        d = sizes.LADDER[name][1]
        assert cfg.vocab_size == 264 and cfg.n_heads * cfg.head_dim == d
        assert (cfg.n_heads, cfg.head_dim) == (d // 16, 16)
    with pytest.raises(ValueError, match="unknown ladder size 'd1000'.*d64"):
        ladder.get_config("tnl-d1000")
