"""configs/study/hybrid.py plans llama, tnl, gdn, each linear arch's 3:1 hybrid with llama and a
state-size variant of tnl and of gdn on the four-layer rungs at one learning rate (the reasons its
docstring gives hold; each variant holds another state than its arch at every rung), and the
report's "Memory at decode" shows each arch's decoding memory as the accounting computes it."""

import types

import pytest

from linscale_jax.study.presets import preset
from linscale_jax.study.scaling import plan

STATE_VARIANTS = {"tnl+n_heads=4": "tnl", "gdn+expand_v=1": "gdn"}  # the state-size axis: variant -> its arch
ARCHS = ("llama", "tnl", "gdn", "tnl+hybrid=3:1", "hgrn2+hybrid=3:1", "cosformer2+hybrid=3:1", "gdn+hybrid=3:1",
         *STATE_VARIANTS)
SIZES = ("d16", "d32", "d48")


def test_the_preset_plans_every_label_at_every_four_layer_rung(tmp_path):
    from linscale_jax.models import ModelConfig

    study = preset("hybrid")
    runs = plan.build_plan(study, str(tmp_path))
    assert {(r.arch, r.size) for r in runs} == {(a, s) for a in ARCHS for s in SIZES}
    assert sorted(r.name for r in runs if r.seed) == sorted(f"{a}-d16-seed1" for a in ARCHS)
    for r in runs:
        layers = ModelConfig.from_config(r.config.model).layer_archs
        base = r.arch.split("+")[0]
        assert layers == ((base, base, base, "llama") if "+hybrid=3:1" in r.arch else (base,) * 4), r.name
        assert (r.config.optim.rule, r.config.optim.lr, r.config.train.batch_size) == ("paper", 3e-3, 8)
    paper = preset("cpu_paper")  # the llama and tnl runs are cpu_paper's own (the docstring's copy)
    by = {r.name: r for r in runs}
    for a in ("llama", "tnl"):
        for s in SIZES:
            assert by[f"{a}-{s}"].config.to_dict() == plan.run_config(paper, a, s).to_dict()


def test_each_state_variant_holds_another_state_than_its_arch_at_every_rung():
    from linscale_jax.models import ModelConfig, accounting
    from linscale_jax.study.scaling import state_axis

    study = preset("hybrid")
    seq = int(study.overrides.train.seq_len)

    def state(label, size):
        return accounting.state_floats_per_layer(ModelConfig.from_config(plan.run_config(study, label, size).model), seq)

    for variant, arch in STATE_VARIANTS.items():
        assert state_axis.family(variant) == arch  # one family: the report fits the loss against the state
        ratios = [state(variant, s) / state(arch, s) for s in SIZES]
        assert all(r != 1.0 for r in ratios), (variant, ratios)


def test_why_the_preset_leaves_the_two_layer_rungs_and_the_tuned_rule(tmp_path):
    from linscale_jax.train.rule import RuleError

    study = preset("hybrid")
    with pytest.raises(ValueError, match="longer than model.n_layers=2"):
        plan.make_run(study, plan.run_config(study, "tnl+hybrid=3:1", "d16l2"), "tnl+hybrid=3:1", "d16l2", 0,
                      str(tmp_path), 0)
    with pytest.raises(RuleError, match="outside that range"):
        plan.run_config(preset("cpu"), "gdn", "d48")


def _row(study, arch, size, seed=0):
    from linscale_jax.study.scaling import results

    cfg = plan.run_config(study, arch, size, seed)
    run = types.SimpleNamespace(config=cfg)
    return dict(name=cfg.name, arch=arch, size=size, seed=seed, n_params=plan.make_run(
        study, cfg, arch, size, seed, "/tmp/unused", 0).n_params, **results.decode_memory(run))


def _table(lines):
    rows = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| arch")]
    return {cells[0]: cells for cells in ([c.strip() for c in ln.strip("|").split("|")] for ln in rows)}


def test_memory_at_decode_is_the_accounting_at_the_largest_size():
    from linscale_jax.models import ModelConfig, accounting
    from linscale_jax.study.scaling.report import memory

    study = preset("hybrid")
    labels = ("llama", "tnl", "tnl+hybrid=3:1", "gdn+hybrid=3:1")
    seq = int(plan.run_config(study, "llama", "d48").train.seq_len)
    found = dict(design=dict(seq_len=seq),
                 runs=[_row(study, a, s) for a in labels for s in ("d16", "d48")] + [_row(study, "llama", "d16", 1)])
    lines = memory.section(types.SimpleNamespace(found=found))
    assert lines[0] == "## Memory at decode"
    table = _table(lines)
    assert set(table) == set(labels) and all(cells[1] == "d48" for cells in table.values())
    for a in labels:
        mc = ModelConfig.from_config(plan.run_config(study, a, "d48").model)
        kv = accounting.kv_cache_bytes_per_token(mc)
        assert table[a][3] == f"{kv:,}"
        assert table[a][5] == f"{accounting.state_floats_per_layer(mc, seq):,.0f}"
    kv_llama = int(table["llama"][3].replace(",", ""))
    assert kv_llama == 4 * 2 * 3 * 16 * 4  # 4 layers x (k, v) x 3 heads x head dim 16 x f32
    assert table["tnl"][3] == "0" and table["tnl"][2] == "0 of 4" and table["llama"][4] == "1"
    for a in ("tnl+hybrid=3:1", "gdn+hybrid=3:1"):  # one softmax layer of four: a quarter of llama's cache
        assert table[a][2] == "1 of 4" and float(table[a][4]) == 0.25


def test_memory_at_decode_needs_a_hybrid_or_a_linear_arch_beside_llama():
    from linscale_jax.study.scaling.report import memory

    study = preset("hybrid")

    def lines(*labels):
        found = dict(design=dict(seq_len=128), runs=[_row(study, a, "d16") for a in labels])
        return memory.section(types.SimpleNamespace(found=found))

    assert lines("llama") == [] and lines("tnl", "gdn") == []
    assert lines("llama", "gdn")[0] == lines("tnl+hybrid=3:1")[0] == "## Memory at decode"
    assert "| tnl+hybrid=3:1 | d16 | 1 of 4 | " in "\n".join(lines("tnl+hybrid=3:1"))  # no llama: no ratio
    assert lines("tnl+hybrid=3:1")[-2].split("|")[5].strip() == "—"
    # findings.json written before runs carried their decoding memory: no section
    old = dict(design=dict(seq_len=128), runs=[{k: v for k, v in _row(study, "tnl", "d16").items()
                                                if k not in memory.KEYS}])
    assert memory.section(types.SimpleNamespace(found=old)) == []
