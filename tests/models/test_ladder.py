"""The CPU ladder keeps the paper's structure (configs/ladder.py): >= 4 heads, one head dim, a
low-rank gate, TNL decay spectra with fast and slow heads in every non-final layer, undecayed layers
a minority; the study presets use ladder sizes only; g is 8d/3 rounded to a multiple of 8."""

import importlib.util
import os

import numpy as np
import pytest

from linscale_jax.models import ModelConfig, sizes
from linscale_jax.models.tnl import tnl_log_decay

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST, SLOW, UNDECAYED = 16.0, 256.0, 1e4  # memories 1/(1-λ) in tokens


def preset_sizes() -> set[str]:
    out = set()
    for name in ("cpu", "quick"):
        spec = importlib.util.spec_from_file_location(f"p_{name}", os.path.join(ROOT, "configs", "study", f"{name}.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out |= set(mod.get_config().sizes.split(","))
    return out


def memories(cfg: ModelConfig) -> np.ndarray:
    """[l, h] tokens of memory 1/(1-λ) of TNL's heads."""
    lam = np.stack([np.exp(tnl_log_decay(cfg.tnl_decay_rule, cfg.n_heads, j, cfg.n_layers).astype(np.float64))
                    for j in range(cfg.n_layers)])
    return 1.0 / (1.0 - lam)


def test_presets_use_ladder_sizes():
    assert preset_sizes() <= set(sizes.LADDER), preset_sizes() - set(sizes.LADDER)


@pytest.mark.parametrize("name", list(sizes.LADDER))
def test_ladder_size_keeps_structure(name):
    cfgs = {a: ModelConfig.from_config(sizes.ladder_model(a, name)) for a in ("llama", "tnl", "hgrn2", "cosformer2")}
    tnl = cfgs["tnl"]
    d, h, l = tnl.d_model, tnl.n_heads, tnl.n_layers
    assert h >= 4 and tnl.head_dim == sizes.LADDER_HEAD_DIM
    assert all(c.head_dim == sizes.LADDER_HEAD_DIM for c in cfgs.values())
    assert tnl.head_dim <= d // 4  # gate rank d/h: low rank
    assert tnl.ffn_dim == 8 * -(-int(8 * d / 3) // 8) and tnl.ffn_dim < 8 * d / 3 + 8
    mem = memories(tnl)
    for j in range(l - 1):  # every non-final layer: a fast head and a slow head
        assert mem[j].min() <= FAST and mem[j].max() >= SLOW, (name, j, mem[j])
    undecayed = [j for j in range(l) if mem[j].min() > UNDECAYED]
    assert undecayed == [l - 1] and 2 * len(undecayed) < l


def test_ladder_widths_and_paper_rule():
    assert [sizes.LADDER[n][1] for n in sizes.LADDER] == [32, 40, 48, 64, 80, 96, 128, 192, 256, 384, 512]
    assert [sizes.paper_ffn_dim(d, 8) for d in (32, 48, 64, 96)] == [88, 128, 176, 256]
    assert [sizes.paper_ffn_dim(d) for d in (512, 768, 1024)] == [1536, 2048, 2816]
