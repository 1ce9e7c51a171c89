"""The CPU ladder keeps the paper's structure (configs/ladder.py): one head dim of 16 (a 256-float
state per linear head), >= 4 layers (TNL's undecayed part and HGRN2's lower-bound spectrum are not
a third of the model), >= 4 heads from d64 up (2-3 at d32-d48, one at d16), a low-rank gate; the paper's TNL decay formula by
default; the study presets use ladder sizes only; g is 8d/3 rounded up to a multiple of 8."""

import importlib.util
import os

import numpy as np
import pytest

from linscale_jax.models import ModelConfig, sizes
from linscale_jax.models.hgrn2 import lower_bound_per_layer
from linscale_jax.models.tnl import tnl_log_decay

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNDECAYED = 1e4  # memory 1/(1-λ) in tokens above which a head counts as undecayed


def preset_sizes() -> set[str]:
    out = set()
    for name in ("cpu", "quick"):
        spec = importlib.util.spec_from_file_location(f"p_{name}", os.path.join(ROOT, "configs", "study", f"{name}.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out |= set(mod.get_config().sizes.split(","))
    return out


def memories(cfg: ModelConfig) -> np.ndarray:
    """[l, h] tokens of memory 1/(1-λ) of TNL's heads (inf for λ = 1)."""
    lam = np.stack([np.exp(tnl_log_decay(cfg.tnl.decay_rule, cfg.n_heads, j, cfg.n_layers).astype(np.float64))
                    for j in range(cfg.n_layers)])
    with np.errstate(divide="ignore"):
        return 1.0 / (1.0 - lam)


def test_presets_use_ladder_sizes():
    assert preset_sizes() <= set(sizes.LADDER), preset_sizes() - set(sizes.LADDER)


@pytest.mark.parametrize("name", list(sizes.LADDER))
def test_ladder_size_keeps_structure(name):
    cfgs = {a: ModelConfig.from_config(sizes.ladder_model(a, name)) for a in ("llama", "tnl", "hgrn2", "cosformer2")}
    tnl = cfgs["tnl"]
    d, h, l = tnl.d_model, tnl.n_heads, tnl.n_layers
    assert all(c.head_dim == sizes.LADDER_HEAD_DIM == 16 for c in cfgs.values())
    assert tnl.head_dim ** 2 >= 256  # each linear head's state e × e
    assert (h >= 2 or d < 32) and (h >= 4 or d < 64)  # d16: one head (head dim 16 kept)
    assert tnl.head_dim <= d // 2 or (h == 1 and d < 32)  # gate rank e = d/h: low rank (d16: one head)
    assert tnl.ffn_dim == 8 * -(-int(8 * d / 3) // 8) and tnl.ffn_dim < 8 * d / 3 + 8
    assert l >= 4 or (l >= 2 and name.endswith(f"l{l}"))  # shallow rungs carry their depth: d32l2, d48l3
    # HGRN2: lower bounds 0, 1/l, ..., (l-1)/l at init; the top one >= 3/4
    beta = lower_bound_per_layer(cfgs["hgrn2"])
    np.testing.assert_allclose(beta, np.arange(l) / l, atol=1e-6)
    # TNL, the paper's formula (default): head 0 undecayed in every layer, every other head decayed,
    # memories growing with depth
    assert tnl.tnl.decay_rule == "paper"
    mem = memories(tnl)
    assert np.all(np.isinf(mem[:, 0])) and np.all(np.isfinite(mem[:, 1:]))
    assert np.all(np.diff(mem[:, 1:], axis=0) > 0) and np.all(np.diff(mem[:, 1:], axis=1) < 0)
    # the released rule: only the last layer undecayed, a minority (1/l <= 1/4)
    mem = memories(tnl.replace(tnl=dict(decay_rule="alibi_layer")))
    undecayed = [j for j in range(l) if mem[j].min() > UNDECAYED]
    assert undecayed == [l - 1] and (3 * len(undecayed) < l or l <= 3)  # 2 or 3 layers: a half or a third


def test_ladder_widths_and_paper_rule():
    assert [sizes.LADDER[n][1] for n in sizes.LADDER] == [16, 16, 32, 32, 48, 48, 64, 80, 96, 128, 160, 192, 32, 48,
                                                          64, 80, 80, 64, 80, 96, 128, 192, 256, 384, 512]
    # the one-shape families (laws: a ladder of one depth, or of one aspect ratio d/l = 16); the depth-2 one
    # reaches 2x the width of d96l2, so a prediction beyond a d32l2-d96l2 ladder has a rung above N_opt
    assert [n for n in sizes.LADDER if n.endswith("l2")] == ["d16l2", "d32l2", "d48l2", "d64l2", "d80l2", "d96l2",
                                                             "d128l2", "d160l2", "d192l2"]
    assert [n for n in sizes.LADDER if n.endswith("l3")] == ["d32l3", "d48l3", "d64l3", "d80l3"]
    assert [sizes.paper_ffn_dim(d, 8) for d in (32, 48, 64, 96)] == [88, 128, 176, 256]
    assert [sizes.paper_ffn_dim(d) for d in (512, 768, 1024)] == [1536, 2048, 2816]


def test_variant_labels():
    m = sizes.ladder_model("cosformer2+tpe=none", "d64")
    assert (m["arch"], m["cosformer2"], m["d_model"]) == ("cosformer2", {"tpe": "none"}, 64)
    # an arch's options by name, spelled <arch>.<option>, or by their earlier flat name
    for label in ("tnl+decay_rule=alibi_layer+lrpe=true", "tnl+tnl.decay_rule=alibi_layer+tnl.lrpe=true",
                  "tnl+tnl_decay_rule=alibi_layer+tnl_lrpe=true"):
        assert sizes.split_variant(label) == ("tnl", {"tnl": {"decay_rule": "alibi_layer", "lrpe": True}})
    assert sizes.split_variant("tnl+short_conv=4+norm_eps=1e-5") == ("tnl", {"short_conv": 4, "norm_eps": 1e-5})
    assert sizes.parse_name("cosformer2+tpe=none-d64") == ("cosformer2+tpe=none", "d64")
    with pytest.raises(ValueError, match="neither a common model field nor an option of tnl"):
        sizes.split_variant("tnl+nonsense=1")
    with pytest.raises(ValueError, match="'cosformer2' options do not apply to tnl"):
        sizes.split_variant("tnl+tpe=none")
    with pytest.raises(ValueError, match=r"cosformer2.tpe takes one of \('lightnet'"):
        sizes.split_variant("cosformer2+tpe=lightning")
    with pytest.raises(ValueError, match="is not a int"):
        sizes.split_variant("tnl+n_layers=many")
    with pytest.raises(ValueError, match="unknown architecture"):
        sizes.split_variant("gpt+tpe=none")


def test_tpe_preset_runs_the_variant_as_one_more_arch(tmp_path):
    from linscale_jax.study.scaling import plan

    spec = importlib.util.spec_from_file_location("p_tpe", os.path.join(ROOT, "configs", "study", "tpe.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    study = mod.get_config()
    runs = plan.build_plan(study, str(tmp_path))
    cpu = set(plan.split_list(study.sizes))
    assert {(r.arch, r.size) for r in runs} == {(a, s) for a in ("llama", "cosformer2", "cosformer2+tpe=none")
                                                for s in cpu}
    by = {r.name: r for r in runs}
    size = sorted(cpu)[0]
    plain, none = by[f"cosformer2-{size}"], by[f"cosformer2+tpe=none-{size}"]
    assert (plain.config.model.arch, plain.config.model.cosformer2.tpe) == ("cosformer2", "lightnet")
    assert (none.config.model.arch, none.config.model.cosformer2.tpe) == ("cosformer2", "none")
    assert none.n_params < plain.n_params and none.workdir.endswith(f"cosformer2+tpe=none-{size}")
    assert "--config=ladder:cosformer2+tpe=none-" in none.command
    # the ablation changes one mechanism: the variant trains at its arch's settings for every size,
    # pinned (the tuned rule's per-arch range need not hold the variant's own parameter count)
    for s in cpu:
        a, b = by[f"cosformer2-{s}"].config, by[f"cosformer2+tpe=none-{s}"].config
        assert (a.optim.lr, a.optim.b2, a.optim.warmup_steps, a.train.batch_size, a.train.steps) == \
            (b.optim.lr, b.optim.b2, b.optim.warmup_steps, b.train.batch_size, b.train.steps)
        assert a.optim.rule == "tuned" and b.optim.rule == "paper"


@pytest.mark.parametrize("arch", ["tnl", "hgrn2", "cosformer2", "gdn"])
def test_state_size_variants_build_and_count_their_state(arch):
    """The state-size axis: fewer, wider heads at one width (<arch>+n_heads=2 at d64: head dim 32
    instead of 16) build, and ArchSpec.state_floats, the decoding cache and describe agree; the
    state per layer doubles (h·e² = d·e) where the parameters stay (HGRN2: none depend on h)."""
    from linscale_jax.models import accounting, registry
    from linscale_jax.models.describe import describe_row

    base, wide = (ModelConfig(**sizes.ladder_model(label, "d64")) for label in (arch, f"{arch}+n_heads=2"))
    assert (base.head_dim, wide.head_dim) == (16, 32)
    spec = registry.get(arch)
    for c in (base, wide):
        assert spec.state_floats(c, 128) == registry.cache_floats(c, 128) == describe_row(c, 128)["state_floats_per_layer"]
    conv = 3 * 4 * 64 if arch == "gdn" else 0  # gdn's convolution inputs do not depend on the heads
    assert spec.state_floats(wide, 128) - conv == 2 * (spec.state_floats(base, 128) - conv)
    if arch == "hgrn2":
        assert accounting.param_counts(wide) == accounting.param_counts(base)
    if arch == "gdn":  # the value expansion, the other state axis
        narrow = ModelConfig(**sizes.ladder_model("gdn+expand_v=1", "d64"))
        assert spec.state_floats(narrow, 128) == 4 * 16 * 16 + 3 * 3 * 64
