"""The step roofline (linscale_jax.models.roofline, bench/tpu_roofline.py) against the accounting:
its matmul rows add up to the accounting's exact training FLOPs (llama, tnl), every weight matrix
is counted once per layer, and the bench prints / dumps the step of the four architectures.
Legend: l layers, d width, h heads, e head dim, g GLU width, n sequence length."""

import json
import os
import subprocess
import sys

import pytest

from kernels_pallas import tpu
from linscale_jax.models import accounting
from linscale_jax.models import ModelConfig
from linscale_jax.models import roofline as rl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = tpu.GENERATIONS["v5p"]
B, N = 2, 256  # two chunks of 128


def small(arch):
    return ModelConfig(arch=arch, n_layers=2, d_model=256, n_heads=2, ffn_dim=512, vocab_size=512)


def test_llama_rows_add_up_to_the_accounting():
    """dense rows + causal attention as the accounting counts it (QKᵀ and PV over (n+1)/2 keys)
    == flops_per_token_exact x tokens; the flash kernel's backward recomputes P (10pe against the
    accounting's 8pe per pair), so its rows carry more FLOPs than the accounting."""
    cfg = small("llama")
    out = rl.step_roofline(cfg, GEN, B, N)
    rows = {r["name"]: r for r in out["rows"]}
    dense = sum(r["flops"] for name, r in rows.items() if name.startswith("dense"))
    attention = 3 * cfg.n_layers * B * N * 2 * 2 * cfg.d_model * (N + 1) / 2
    assert dense + attention == pytest.approx(out["step"]["useful_flops"], rel=1e-12)
    flash = rows["flash_forward"]["flops"] + rows["flash_backward"]["flops"]
    assert flash == pytest.approx(attention * 14 / 12)


def test_tnl_rows_add_up_to_the_accounting():
    """dense rows + 3 x the chunked form's forward count (per token and head 2c(k + e) + 4ke)
    == the accounting's exact training FLOPs at the kernel's chunk; the forward kernel adds the
    low-part pass of its decayed state update (2ke), the backward kernels recompute the states
    (more than 2 x forward)."""
    cfg = small("tnl")
    out = rl.step_roofline(cfg, GEN, B, N)
    rows = {r["name"]: r for r in out["rows"]}
    dense = sum(r["flops"] for name, r in rows.items() if name.startswith("dense"))
    c, e, tokens_heads = 128, cfg.head_dim, cfg.n_layers * B * N * cfg.n_heads
    chunked = tokens_heads * (2 * c * 2 * e + 4 * e * e)
    assert dense + 3 * chunked == pytest.approx(out["step"]["useful_flops"], rel=1e-12)
    fwd = rows["linear_attention_forward"]["flops"]
    assert fwd == chunked + tokens_heads * 2 * e * e
    assert out["step"]["chunk"] == 128
    backward = sum(rows[f"linear_attention_{k}"]["flops"] for k in ("intra", "dq", "reverse"))
    assert backward > 2 * fwd


@pytest.mark.parametrize("arch", ["tnl", "hgrn2", "cosformer2", "llama"])
def test_every_weight_matrix_once_per_layer(arch):
    cfg = small(arch)
    mats = rl.weight_matrices(cfg)
    assert mats["lm_head"] == [(cfg.d_model, cfg.vocab_size, 1)]
    d, g, l = cfg.d_model, cfg.ffn_dim, cfg.n_layers
    assert sum(i * o * n for i, o, n in mats["mlp"]) == 3 * d * g * l  # the GLU's three matrices
    n_matrix_params = sum(i * o * n for group in mats.values() for i, o, n in group)
    assert n_matrix_params <= accounting.param_counts(cfg)["total"]
    out = rl.step_roofline(cfg, GEN, B, N)["step"]
    assert 0 < out["mfu_bound"] <= 1.0
    assert out["time_s"] == pytest.approx(sum(r["time_s"] for r in rl.step_roofline(cfg, GEN, B, N)["rows"]))


def test_unknown_arch_has_a_clear_error():
    cfg = small("tnl")
    object.__setattr__(cfg, "arch", "mamba")
    with pytest.raises(ValueError, match="LINEAR_MIXERS"):
        rl.mixer_costs(cfg, GEN, 1, 128)


def test_bench_prints_the_four_archs():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "tpu_roofline.py"),
                          "--config=configs/paper.py:hgrn2-70m", "--tpu=v6e", "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["tpu"] == "v6e" and out["step"]["arch"] == "hgrn2" and out["step"]["chunk"] == 256
    assert [s["arch"] for s in out["archs"]] == ["llama", "tnl", "hgrn2", "cosformer2"]
    assert {r["name"] for r in out["rows"]} >= {"linear_attention_intra", "dense mlp", "optimizer (AdamW)"}


def test_gdn_rows_are_the_delta_rule_kernels_and_hybrids_are_refused():
    """gdn's mixer rows are the delta rule's Pallas kernels (their cost estimates) over every layer
    and batch row; its useful FLOPs are the accounting's at the delta rule's own TPU chunk; a hybrid
    stack is refused in one line."""
    from kernels_pallas.delta_rule.config import TPU_BLOCKS
    from kernels_pallas.delta_rule.roofline import delta_rule_costs

    cfg = small("gdn")
    out = rl.step_roofline(cfg, GEN, B, N)
    kernels = [r for r in out["rows"] if r["name"].startswith("delta_rule")]
    one = delta_rule_costs(1, N, 2, 128, 256, blocks=TPU_BLOCKS["v5p"])
    assert [r["flops"] for r in kernels] == [c.flops * B * 2 for c in one]
    chunk = TPU_BLOCKS["v5p"].chunk_size
    want = accounting.flops_per_token_exact(cfg.replace(chunk_size=chunk, impl="pallas"), N) * B * N
    assert out["step"]["useful_flops"] == pytest.approx(want) and out["step"]["chunk"] == chunk
    with pytest.raises(ValueError, match=r"roofline: the hybrid stack model.layers='tnl,llama' is not modelled"):
        rl.step_roofline(small("tnl").replace(layers="tnl,llama"), GEN, B, N)
