"""study.scaling.bracket_design predicts a ladder's bracketing from a law: its draws are the study's
checkpoints on the law, its shares are fit.approach1.envelope's, the optimum's tokens per parameter
is the law's minimum along a compute line, and a design whose small rungs run longer brackets what
one budget for every size does not; study.tokens_by_size gives each size its own budget."""

import numpy as np
import pytest

from linscale_jax.fit import approach1
from linscale_jax.study.presets import preset
from linscale_jax.study.scaling import bracket_design as bd, plan, results
from linscale_jax.study.scaling.report import tokens_line

# A law with its optimum near 40 tokens per parameter at these sizes (llama's on the depth-2 ladder)
LAW = dict(E=1.0, A=25.5, alpha=0.41, B=210.0, beta=0.46)
RUNGS = [bd.Rung(n, 6.0 * n) for n in (2.5e4, 5.5e4, 1.0e5, 1.55e5, 2.2e5)]
SAME = {r.n_params: 3.1e6 for r in RUNGS}
SAME_END = {r.n_params: 1.26e7 * RUNGS[0].n_params / r.n_params for r in RUNGS}  # every run ends at one compute


def test_the_draws_are_the_studys_checkpoints_on_the_law():
    t = bd.table_of(LAW, RUNGS[:2], SAME, checkpoints=12, min_tokens=3e5)
    first = t.take(t.n_params == RUNGS[0].n_params)
    assert np.allclose(first.tokens, 3.1e6 * np.arange(2, 13) / 12)  # 3.1e6/12 < min_tokens: left out
    assert np.allclose(first.flops, first.tokens * 6.0 * RUNGS[0].n_params)
    assert np.allclose(first.loss, LAW["E"] + LAW["A"] / 2.5e4 ** 0.41 + LAW["B"] / first.tokens ** 0.46)
    # a run's offset moves all its checkpoints alike; checkpoint noise does not
    shifted = bd.table_of(LAW, RUNGS[:2], SAME, noise=bd.Noise(run_sd=0.05), rng=np.random.default_rng(3))
    d = shifted.loss - bd.table_of(LAW, RUNGS[:2], SAME).loss
    assert np.ptp(d[:12]) < 1e-12 and abs(d[0]) > 1e-4 and abs(d[0] - d[12]) > 1e-4
    with pytest.raises(Exception, match="give that size more tokens"):
        bd.table_of(LAW, RUNGS[:2], SAME, min_tokens=3.0e6)


def test_shares_are_the_envelopes_own_count():
    t = bd.table_of(LAW, RUNGS, SAME_END)
    env = approach1.envelope(t)
    s = bd.shares(t)
    assert s["interior"] == pytest.approx(np.mean(env.clamped == 0))
    assert sum(s.values()) == pytest.approx(1.0)


def test_tokens_per_param_at_the_optimum_is_the_laws_minimum_along_a_compute_line():
    n = 5.5e4
    r = bd.tokens_per_param_at_optimum(LAW, n)
    c = n * r * n  # N·D at that optimum
    grid = np.exp(np.linspace(np.log(n / 4), np.log(n * 4), 4001))
    best = grid[np.argmin(bd.law_loss(LAW, grid, c / grid))]
    assert best == pytest.approx(n, rel=2e-3)
    assert 30 < r < 60


def test_longer_small_rungs_bracket_what_one_budget_does_not():
    # one budget: past d64's optimum no smaller run reaches the compute where a larger size wins
    same = bd.predict(LAW, RUNGS, SAME)
    ends = bd.predict(LAW, RUNGS, SAME_END)
    assert same["smallest"] > 0.5 and same["interior"] < 0.3
    assert ends["interior"] > 0.5 > ends["smallest"]
    # a data-hungry law (optimum at ~1e4 tokens per parameter) is bracketed by neither
    hungry = dict(E=0.24, A=7.1, alpha=0.31, B=14.1, beta=0.16)
    assert bd.predict(hungry, RUNGS, SAME_END)["interior"] == 0.0
    noisy = bd.predict(LAW, RUNGS, SAME_END, noise=bd.Noise(0.015, 0.015), draws=8, seed=1)
    lo, hi = noisy["interior_range"]
    assert 0.0 < lo <= noisy["interior"] <= hi < 1.0


def test_tokens_by_size_gives_each_size_its_budget(tmp_path):
    study = preset("cpu")
    study.sizes = "d32l2,d48l2"
    study.archs = "llama"
    study.replicates.sizes = ""
    study.tokens_by_size = "d32l2=1572864"
    runs = plan.build_plan(study, str(tmp_path))
    by = {r.size: r for r in runs}
    assert (by["d32l2"].tokens, by["d48l2"].tokens) == (1572864, 3145728)
    assert by["d32l2"].config.checkpoint.every_steps == by["d32l2"].steps // 12
    d = results.design(study, runs)
    assert d["tokens_by_size"] == {"d32l2": 1572864, "d48l2": 3145728}
    assert "d32l2 1.57e+06, d48l2 3.15e+06" in tokens_line(d)
    study.tokens_by_size = ""
    assert results.design(study, plan.build_plan(study, str(tmp_path)))["tokens_by_size"] is None
    study.tokens_by_size = "d16=100,d32l2=1572864"  # a size the study does not train: unused
    study.replicates.update(sizes="d48l2,d96l2", seeds=1)  # as the main job's, narrowed to 2 sizes
    assert [(r.size, r.tokens) for r in plan.build_plan(study, str(tmp_path))] == [
        ("d32l2", 1572864), ("d48l2", 3145728), ("d48l2", 3145728)]
    study.replicates.sizes = "d96x"
    with pytest.raises(ValueError, match="replicates.sizes names 'd96x', not a size of ladder"):
        plan.build_plan(study, str(tmp_path))
    study.replicates.sizes = ""
    for spec, msg in (("d16x=100", r"names 'd16x', not a size of ladder: unknown ladder size"),
                      ("d32l2:100", "is not size=tokens"), ("d32l2=0", "give it a positive budget")):
        study.tokens_by_size = spec
        with pytest.raises(ValueError, match=msg):
            plan.build_plan(study, str(tmp_path))


def test_the_precise_preset_is_the_main_job_with_three_seeds_at_the_ends(tmp_path):
    main = plan.build_plan(preset("cpu"), str(tmp_path / "main"))
    precise = plan.build_plan(preset("cpu_precise"), str(tmp_path / "precise"))
    assert (len(main), len(precise)) == (24, 44)
    seeds = {}
    for r in precise:
        seeds.setdefault((r.arch, r.size), []).append(r.seed)
    assert {k: len(v) for k, v in seeds.items() if len(v) > 1} == {
        (a, s): 3 for a in ("llama", "tnl", "hgrn2", "cosformer2") for s in ("d32l2", "d48l2", "d96l2")}
    first = {(r.arch, r.size): sorted(r.command.split()) for r in main if r.seed == 0}
    ours = {(r.arch, r.size): sorted(r.command.replace(str(tmp_path / "precise"), str(tmp_path / "main")).split())
            for r in precise if r.seed == 0}
    assert len(ours) == 20 and ours == first  # the 20 main runs train as the main job's (flags in any order)


def test_a_finished_studys_laws_noise_and_sizes_predict_its_redesign(tmp_path):
    import json

    from linscale_jax.fit.table import write_csv

    (tmp_path / "fit").mkdir()
    write_csv(bd.table_of(LAW, RUNGS, SAME, arch="llama"), tmp_path / "fit" / "table.csv")
    found = dict(estimators=["val_loss"], design=dict(seq_len=128, batch="4", fit_min_step=448),
                 laws_nd={"val_loss": {"llama": {"law": LAW}}}, checkpoint_sd={"llama": {"sd": 0.015}},
                 by_estimator={"val_loss": {"seed_sd_pooled": {"sd": 0.0177}}})
    (tmp_path / "findings.json").write_text(json.dumps(found))
    ends = [SAME_END[r.n_params] for r in RUNGS]
    got = bd.predict_study(str(tmp_path), ends, draws=4, seed=2)["llama"]
    noise = bd.noise_of(found, "llama", "val_loss")
    assert noise.checkpoint_sd == 0.015 and noise.run_sd == pytest.approx(np.sqrt(0.0177 ** 2 - 0.015 ** 2 / 6))
    assert got == bd.predict(LAW, RUNGS, SAME_END, min_tokens=448 * 512, noise=noise, draws=4, seed=2)
    with pytest.raises(Exception, match="give one per size"):
        bd.predict_study(str(tmp_path), ends[:4])


def test_the_report_sets_the_laws_tokens_per_param_against_each_runs():
    from linscale_jax.study.scaling.report.laws import tokens_per_param_table

    runs = [dict(arch="llama", n_params=n, tokens=3.1e6) for n in (2.5e4, 1.0e5, 1.0e5)]  # a replicate counted once
    found = dict(estimators=["val_loss"], laws_nd={"val_loss": {"llama": {"law": LAW}, "tnl": {"note": "no fit"}}},
                 runs=runs)
    lines = tokens_per_param_table(found)
    want = [f"{bd.tokens_per_param_at_optimum(LAW, n):.3g} / {3.1e6 / n:.3g}" for n in (2.5e4, 1.0e5)]
    assert lines[-1] == f"| llama | {want[0]}, {want[1]} |" and want[0].endswith("/ 124") and lines[-2] == "|---|---|"
    assert tokens_per_param_table(dict(estimators=["val_loss"], laws_nd={}, runs=runs)) == []


def test_a_lack_of_fit_against_an_assumed_seed_sd_renders_its_infinite_df():
    from linscale_jax.study.scaling.laws import _lof  # a study without replicates (noise.seed_sd assumed)

    lof = dict(rms=0.005, sizes=5, df1=2, df2=None, F=0.0257, p=0.9746)
    assert _lof(dict(lack_of_fit=lof)) == "F 0.026 (2, ∞), p 0.97"
    assert _lof(dict(lack_of_fit=dict(lof, df2=8.0))) == "F 0.026 (2, 8), p 0.97"


@pytest.mark.parametrize("text, message", [
    (None, "cannot read"),
    ('{"estimators": ["val_loss"], "design"', "is not valid JSON"),
    ('{"estimators": ["val_loss"]}', "has no design"),
])
def test_a_study_without_readable_findings_is_one_line_naming_the_file(tmp_path, text, message):
    from linscale_jax.study import files

    path = files.study_path(str(tmp_path), files.FINDINGS_JSON)
    if text is not None:
        with open(path, "w") as f:
            f.write(text)
    with pytest.raises(Exception, match=message) as e:
        bd.predict_study(str(tmp_path), [1e6, 1e6, 1e6])
    assert "\n" not in str(e.value) and files.FINDINGS_JSON in str(e.value)
