"""The tuning grid (study.tune, study.tune_fit): the staged, pruned grid on a planted loss surface
(stages, edge growth, far fewer cells than the full grid, the planted optimum found), the power-law
fit of lr* and batch* with bootstrap intervals on planted optima (the planted law inside, a wrong
one outside), the preset's dry run, and a real miniature tuning end to end (rule file, table, plot)."""

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from linscale_jax.study import experiments
from linscale_jax.study.tune import fit as tune_fit, grid as tune_grid
from linscale_jax.study.tune.fit import Cell

ROOT = Path(__file__).resolve().parents[2]


def preset(name="tune"):
    spec = importlib.util.spec_from_file_location(f"_t_{name}", ROOT / "configs" / "study" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


LR_EXP, LR_COEF = -0.6, 12.0  # planted lr*(N) = 12·N^-0.6: above stage 1's rates
B_EXP, B_COEF = 0.5, 0.02  # planted batch*(N) = 0.02·N^0.5 sequences


def surface(study, c: Cell, noise=0.0, rng=None) -> float:
    """A planted loss: parabolic in log2 lr and log2 batch around the planted laws, β2 0.999 best,
    rates 8x above the optimum diverge."""
    n = tune_grid.n_params_of(study, c.arch, c.size)
    k_opt = math.log2(LR_COEF * n ** LR_EXP / float(study.tune.lr_base))
    if c.k - k_opt > 3:
        return math.inf
    b_opt = math.log2(B_COEF * n ** B_EXP)
    loss = 2.0 - 0.1 * math.log(n) + 0.02 * (c.k - k_opt) ** 2 + 0.03 * (math.log2(c.batch) - b_opt) ** 2
    loss += {0.95: 0.02, 0.99: 0.01, 0.999: 0.0}[c.beta2] + (0.01 if c.arch == "hgrn2" else 0.0)
    return loss + (rng.normal(0, noise) if rng is not None else 0.0)


def run_planted(study, noise=0.0):
    rng = np.random.default_rng(0)
    loss, rounds = {}, 0
    while True:
        todo = [c for c in tune_grid.all_cells(study, loss) if c not in loss]
        if not todo:
            return loss, rounds
        rounds += 1
        loss.update({c: surface(study, c, noise, rng) for c in todo})


def fake_n(study, arch, size):
    """N ≈ 12.5·l·d² (d<width>[l<layers>], 4 layers by default): the planner without building models."""
    d, _, l = size[1:].partition("l")
    return 12.5 * int(l or 4) * int(d) ** 2


@pytest.fixture(scope="module")
def planted():
    study = preset()
    study.tune.bootstrap = 200
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tune_grid, "n_params_of", fake_n)
        loss, rounds = run_planted(study)
    return study, loss, rounds


def test_staged_grid_finds_the_planted_optimum_with_few_cells(planted, monkeypatch):
    monkeypatch.setattr(tune_grid, "n_params_of", fake_n)
    study, loss, rounds = planted
    t = study.tune
    sizes = tune_grid.sizes_of(study)
    llama = [c for c in loss if c.arch == "llama" and c.seed == 0]
    full = len(sizes) * 9 * 3 * 3  # 9 rates x 3 batches x 3 beta2 per size
    assert rounds >= 4 and len(llama) < full / 3, (rounds, len(llama))
    for s in sizes:
        mine = [c for c in llama if c.size == s]
        coarse = [c for c in mine if (c.batch, c.beta2) == (t.batch, t.beta2)]
        assert len(coarse) >= 5
        assert {c.beta2 for c in mine} == {0.95, 0.99, 0.999} and len({c.batch for c in mine}) >= 3
        opt = tune_fit.size_optimum(mine, loss)
        n = tune_grid.n_params_of(study, "llama", s)
        k_opt = math.log2(LR_COEF * n ** LR_EXP / t.lr_base)
        assert opt.best.beta2 == 0.999 and abs(opt.best.k - k_opt) <= 0.5 + 1e-9
        assert abs(opt.log2_lr - k_opt) < 0.05  # the parabola's vertex is exact on a parabola
        assert abs(opt.log2_batch - math.log2(B_COEF * n ** B_EXP)) < 0.05 or opt.batch_edge
    # the planted optima lie above stage 1's rates: those lines grew at their top edge
    d16 = sorted(c.k for c in llama if c.size == "d16" and (c.batch, c.beta2) == (t.batch, t.beta2))
    assert len(d16) > 5
    # checks: each linear arch at two sizes, around the rule's rate
    for arch in ("tnl", "hgrn2", "cosformer2"):
        assert {c.size for c in loss if c.arch == arch} == {"d16l2", "d48"}
    assert {c.size for c in loss if c.seed == 1} == {"d16l2", "d48"}


def test_rules_recover_the_planted_laws_with_intervals(planted, monkeypatch):
    monkeypatch.setattr(tune_grid, "n_params_of", fake_n)
    study, loss, _ = planted
    clean = tune_grid.rule_of(study, loss, bootstrap=0)["llama"]  # exact optima: the planted laws exactly
    assert clean["lr"]["exponent"] == pytest.approx(LR_EXP, abs=1e-6)
    assert clean["batch"]["exponent"] == pytest.approx(B_EXP, abs=1e-6)
    rng = np.random.default_rng(0)  # seed noise on every cell, the replicates' included
    noisy = {c: v + (rng.normal(0, 0.003) if np.isfinite(v) else 0.0) for c, v in loss.items()}
    fitted = tune_grid.rule_of(study, noisy)["llama"]
    sigma, pairs = tune_fit.seed_sd(noisy)
    assert pairs == 2 and sigma > 0
    for law, planted_exp in ((fitted["lr"], LR_EXP), (fitted["batch"], B_EXP)):
        lo, hi = law["exponent_ci"]
        assert abs(law["exponent"] - planted_exp) < 0.15 and lo < planted_exp < hi and hi - lo < 0.4
    lo, hi = fitted["lr"]["exponent_ci"]
    assert not lo < -0.3 < hi  # a wrong exponent is outside: the interval can fail


def test_power_law_intervals_cover_at_the_nominal_rate():
    """Planted optima with known noise: the 95 % intervals hold the planted exponent in most of 20
    repetitions, and a wrong one in few."""
    rng = np.random.default_rng(1)
    sizes = {f"d{i}": 1e4 * 3 ** i for i in range(5)}
    hits, wrong = 0, 0
    for rep in range(20):
        loss = {}
        for s, n in sizes.items():
            k_opt = math.log2(LR_COEF * n ** LR_EXP / 1e-3)
            for k in range(int(k_opt) - 3, int(k_opt) + 4):
                for seed in (0, 1):
                    loss[Cell("llama", s, k, 8, 0.99, seed)] = 0.02 * (k - k_opt) ** 2 + rng.normal(0, 0.01)
        cells = {s: [c for c in loss if c.size == s] for s in sizes}
        sd, _ = tune_fit.seed_sd(loss)
        f = tune_fit.fit_rules(cells, loss, sizes, 1e-3, sd, bootstrap=100, seed=rep)
        lo, hi = f["lr"]["exponent_ci"]
        hits += lo <= LR_EXP <= hi
        wrong += lo <= LR_EXP + 0.15 <= hi
    assert hits >= 16 and wrong < 10, (hits, wrong)


def test_vertex_and_edges():
    assert tune_fit.vertex([0, 1, 2], [1.0, 0.0, 1.0], 1) == pytest.approx(1.0)
    assert tune_fit.vertex([0, 1, 2], [2.0, 0.0, 1.0], 1) == pytest.approx(1 + 1 / 6)
    assert tune_fit.vertex([0, 1, 2], [1.0, 0.0, math.inf], 1) == 1.0  # a diverged neighbour
    assert tune_fit.vertex([0, 1], [0.0, 1.0], 0) == 0.0  # at an edge: the best point
    cells = [Cell("llama", "d32", k, 8, 0.99) for k in (0, 1, 2)]
    opt = tune_fit.size_optimum(cells, dict(zip(cells, [1.0, 1.1, 1.2])))
    assert opt.lr_edge and opt.log2_lr == 0.0
    with pytest.raises(ValueError, match="every run diverged"):
        tune_fit.size_optimum(cells, {c: math.inf for c in cells})


def test_tune_preset_dry_run(tmp_path, capsys):
    out = experiments.run(preset(), str(tmp_path), experiments.Options(dry_run=True))
    text = capsys.readouterr().out
    assert out["runs"] == 25 and text.startswith("25 run(s):")  # stage 1: 5 rates x 5 sizes, none measured
    assert "llama-d16-lr0.002-bs8-beta2_0.99" in text and "--config.optim.b2=0.99" in text
    assert "later stages depend" in text


def test_cells_of_every_batch_are_scored_on_the_same_validation_rows(tmp_path):
    from linscale_jax.study.scaling import runner

    study = preset()  # val_batches 32 of the preset's batch 8: 256 rows for every cell
    runs = [tune_grid.make_run(study, Cell("llama", "d16", 0, b, 0.99), str(tmp_path), i)
            for i, b in enumerate((4, 8, 16, 64))]
    assert [r.config.train.batch_size for r in runs] == [4, 8, 16, 64]
    assert [runner.val_batches(study, r) for r in runs] == [64, 32, 16, 4]


@pytest.mark.slow  # a real miniature grid: about a minute on 2 cores
def test_cells_md_leads_with_the_rules_and_their_bounds():
    """cells.md's summary from the shipped rule file: each law with the direction its exponent's
    interval resolves, the archs that share the rule, the sizes whose optimum is a bound, the seed sd."""
    from linscale_jax.study.tune import outputs

    rule = json.loads((ROOT / "linscale_jax" / "train" / "tuned_rule.json").read_text())
    text = "\n".join(outputs.summary_lines(rule))
    lr = rule["archs"]["llama"]["lr"]
    assert f"llama: lr* = {lr['coefficient']:.3g}·N^{lr['exponent']:+.3f}, exponent [{lr['exponent_ci'][0]:+.3f}, " \
           f"{lr['exponent_ci'][1]:+.3f}]: falls with size" in text
    assert "exponent [-0.582, +0.403]: flat within its interval (a trend in N not resolved)" in text  # batch*
    shared = [a for a, x in rule["archs"].items() if x.get("same_as") == "llama"]
    assert f"- {', '.join(shared)}: llama's rule (best checked rate / llama's: " in text
    edges = [s for s, v in rule["archs"]["llama"]["sizes"].items() if v["lr_edge"]]
    assert edges and f"Bounds, not optima (the best cell at the end of its line): llama {edges[0]} (lr)" in text
    assert f"{rule['seed_sd']['value']:.4f} nats ({rule['seed_sd']['pairs']} replicate pairs)" in text
    rule["seed_sd"] = {"value": float("nan"), "pairs": 0}
    assert "- Seed-to-seed sd: not measured (no replicate cells)" in "\n".join(outputs.summary_lines(rule))


def test_cells_md_names_only_the_archs_a_check_measured():
    """A rule file may list an arch that shares the rule without a check of it (a hand-written file
    passed as tune.rule_from): the summary names the checked archs and skips that one."""
    from linscale_jax.study.tune import outputs

    rule = json.loads((ROOT / "linscale_jax" / "train" / "tuned_rule.json").read_text())
    rule["archs"]["rwkv"] = {"same_as": "llama"}
    text = "\n".join(outputs.summary_lines(rule))
    shared = [a for a, x in rule["archs"].items() if x.get("same_as") == "llama" and "check" in x]
    assert shared and f"- {', '.join(shared)}: llama's rule (" in text and "rwkv" not in text


def test_miniature_tuning_end_to_end(tmp_path):
    study = preset()
    study.sizes = "d16l2,d16"
    study.tokens = 24 * 8 * 128.0
    study.checkpoints = 2
    study.eval.val_batches = 2
    study.tune.update(lr_points=3, max_extend=0, batches="8,16", beta2s="0.99", replicate_sizes="smallest",
                      check_archs="", bootstrap=50, prior_lr=4e-3)
    out = experiments.run(study, str(tmp_path))
    d = Path(out["dir"])
    rows = out["rows"]
    assert {r["size"] for r in rows} == {"d16l2", "d16"} and sum(r["best"] for r in rows) == 2
    for size in ("d16l2", "d16"):  # 3 rates at batch 8 (one more at an edge), 3 at batch 16
        mine = [r for r in rows if r["size"] == size and r["seed"] == 0]
        assert len([r for r in mine if r["batch"] == 16]) == 3 and 3 <= len(mine) - 3 <= 4
    assert [r["size"] for r in rows if r["seed"]] == ["d16l2"]  # the replicate of the smallest size
    doc = json.loads((d / "rule.json").read_text())
    from linscale_jax.train import rule

    ns = sorted(tune_grid.n_params_of(study, "llama", size) for size in ("d16l2", "d16"))
    assert doc["archs"]["llama"]["range"] == {"n_min": ns[0], "n_max": ns[1]}  # its fitted sizes
    s = rule.settings(doc, "llama", doc["range"]["n_min"], 128, "byte")
    assert s["batch_size"] in (4, 8, 16, 32) and s["b2"] == 0.99 and s["lr"] > 0
    cells_md = (d / "cells.md").read_text()
    assert (d / "lr.png").stat().st_size > 0 and "| llama | d16 |" in cells_md
    assert cells_md.startswith("# Tuning grid\n\n## Summary\n\n- llama: lr* = ")
    assert (d / "cells.csv").read_text().startswith("arch,size,n_params,lr,batch,beta2,seed,loss,val_loss,best")
    again = experiments.run(study, str(tmp_path))  # everything measured: nothing retrained
    assert again["processed"] == 0
    assert again["rows"] == rows


def checking_the_shipped_rule(monkeypatch):
    """(the tune preset, the shipped grid rule file's path, its contents: no check of llama, no
    horizon), with N from fake_n."""
    from linscale_jax.study.tune import outputs
    from linscale_jax.train import rule

    monkeypatch.setattr(tune_grid, "n_params_of", fake_n)
    monkeypatch.setattr(outputs, "n_params_of", fake_n)
    path = ROOT / "linscale_jax" / "train" / "grid_rule.json"
    return preset(), path, rule.load(path)


def test_an_arch_is_checked_against_a_shipped_rule_without_tuning(monkeypatch):
    """tune.rule_from: nothing tuned; the check arch's cells at the file's rule (its batch and β2,
    the rule's rate and one step either side, grown at an edge); the rule file written back is the
    shipped one with the arch's entry added; a preset at another protocol is refused."""
    from linscale_jax.study.tune import outputs
    from linscale_jax.study.tune.check import TuneConfigError, check_tune
    from linscale_jax.train import rule

    study, shipped_path, shipped = checking_the_shipped_rule(monkeypatch)
    study.tune.update(rule_from=str(shipped_path), check_archs="gdn", check_sizes="d16l2,d32")
    check_tune(study)
    loss, _ = run_planted(study)
    assert {(c.arch, c.size) for c in loss} == {("gdn", "d16l2"), ("gdn", "d32")}  # llama not tuned again
    llama = shipped["archs"]["llama"]
    for size in ("d16l2", "d32"):
        n = fake_n(study, "gdn", size)
        mine = [c for c in loss if c.size == size]
        assert {(c.batch, c.beta2) for c in mine} == {(rule.batch_from_law(llama["batch"], n), llama["beta2"])}
        k = tune_fit.grid_k(tune_fit.law_value(llama["lr"], n), study.tune.lr_base)
        assert {k - 1, k, k + 1} <= {c.k for c in mine}
    rows = outputs.cell_rows(study, {c: (v, v) for c, v in loss.items()})
    doc = outputs.rule_file(study, loss, {}, float("nan"), 0, rows)
    rule.check(doc, "rule.json")
    gdn = doc["archs"]["gdn"]
    assert set(gdn["check"]["sizes"]) == {"d16l2", "d32"} and "provenance" in gdn["check"]
    assert gdn["range"] == {"n_min": fake_n(study, "gdn", "d16l2"), "n_max": fake_n(study, "gdn", "d32")}
    assert ("same_as" in gdn) != gdn["check"]["own_rule"]
    assert doc["archs"]["llama"] == llama and doc["command"] == shipped["command"]
    kept = [c for c in shipped["cells"] if c["arch"] != "gdn"]  # a check run again replaces the arch's cells
    assert doc["cells"] == kept + rows and len(kept) > len(rows)
    study.tune.update(check_sizes="d64l2", own_rule_factor=10.0)  # within the factor at a new size: it still
    loss, _ = run_planted(study)  # shares the rule, over the range it had and the new size
    rows = outputs.cell_rows(study, {c: (v, v) for c, v in loss.items()})
    gdn = outputs.rule_file(study, loss, {}, float("nan"), 0, rows)["archs"]["gdn"]
    assert gdn["same_as"] == "llama" and gdn["range"] == {"n_min": shipped["archs"]["gdn"]["range"]["n_min"],
                                                          "n_max": fake_n(study, "gdn", "d64l2")}
    study.tune.update(check_sizes="d16l2,d32", own_rule_factor=2.0)
    study.cooldown.fraction = 0.2
    with pytest.raises(TuneConfigError, match="data.estimator"):
        check_tune(study)
    study.cooldown.fraction = 0.1
    study.tune.update(check_archs="llama", check_sizes="d48")  # the rule's own arch at another size
    check_tune(study)
    loss, _ = run_planted(study)
    rows = outputs.cell_rows(study, {c: (v, v) for c, v in loss.items()})
    doc = outputs.rule_file(study, loss, {}, float("nan"), 0, rows)
    rule.check(doc, "rule.json")  # its laws stay (no same_as onto itself), the check beside them
    ch = doc["archs"]["llama"].pop("check")
    assert doc["archs"]["llama"] == llama and set(ch["sizes"]) == {"d48"}
    assert [c for c in doc["cells"] if c["arch"] == "llama" and c["size"] != "d48"] == \
        [c for c in shipped["cells"] if c["arch"] == "llama" and c["size"] != "d48"]  # its tuning cells kept
    doc["archs"]["llama"]["check"] = ch
    want = "beyond the factor, tune it again at those sizes." if ch["own_rule"] else "it holds there."
    assert f"- llama's own rule checked at other sizes (best checked rate / the rule's: d48 {ch['sizes']['d48']['ratio']:.2f}): {want}" \
        in "\n".join(outputs.summary_lines(doc))


def test_a_check_at_another_token_budget_leaves_the_rule_and_records_the_horizon(monkeypatch):
    """tune.rule_from at 4x the file's token budget: a horizon check. The rule file written back keeps
    every arch's entry and cell; the check (best rate against the rule's, the budget and its factor)
    lands in horizon_checks, is replaced by a check of the same arch at the same budget, and cells.md
    says so. An arch that would need its own rule from one checked size is refused, naming the fix."""
    from linscale_jax.study.tune import outputs
    from linscale_jax.study.tune.check import TuneConfigError, check_tune
    from linscale_jax.train import rule

    study, shipped_path, shipped = checking_the_shipped_rule(monkeypatch)
    study.tune.update(rule_from=str(shipped_path), check_archs="gdn", check_sizes="d16")
    study.tokens = 4 * shipped["data"]["tokens"]
    check_tune(study)

    loss, _ = run_planted(study)
    rows = outputs.cell_rows(study, {c: (v, v) for c, v in loss.items()})
    doc = outputs.rule_file(study, loss, {}, float("nan"), 0, rows)
    rule.check(doc, "rule.json")
    assert {k: v for k, v in doc.items() if k != "horizon_checks"} == shipped  # gdn has no base rate at d16: no exponent
    (h,) = doc["horizon_checks"]
    n = fake_n(study, "gdn", "d16")
    v = h["sizes"]["d16"]
    planted = LR_COEF * n ** LR_EXP
    assert h["arch"] == "gdn" and h["factor"] == 4 and h["tokens"] == study.tokens and h["cells"] == rows
    assert v["rule_lr"] == pytest.approx(tune_fit.law_value(shipped["archs"]["llama"]["lr"], n))
    assert v["lr_opt"] == pytest.approx(planted, rel=0.05) and v["ratio"] == pytest.approx(v["lr_opt"] / v["rule_lr"])
    again = outputs.horizon_file(study, doc, loss, rows)  # the same check again: replaced, not added
    assert len(again["horizon_checks"]) == 1
    text = outputs.summary_md(study, doc, rows)
    assert f"At 4x the rule's token budget ({study.tokens:.4g} tokens, a horizon check), " \
           f"gdn's best rates are {v['ratio']:.2f}–{v['ratio']:.2f}x the rule's." in text
    assert f"| gdn | d16 | {study.tokens:.4g} | 4 | {v['rule_lr']:.3g} | {v['lr_opt']:.3g} |" in text
    study.tune.check_archs = "llama"  # tuned at d16 in the file: a pair of budgets, an exponent
    loss, _ = run_planted(study)
    llama_rows = outputs.cell_rows(study, {c: (v, v) for c, v in loss.items()})
    both = outputs.rule_file(study, loss, {}, float("nan"), 0, llama_rows)
    rule.check(both, "rule.json")
    assert [h["arch"] for h in both["horizon_checks"]] == ["llama"]
    (p,) = both["horizon"]["pairs"]
    base = shipped["archs"]["llama"]["sizes"]["d16"]["lr_opt"]
    assert p["lr_base"] == base and p["lr_at"] == both["horizon_checks"][0]["sizes"]["d16"]["lr_opt"]
    assert both["horizon"]["exponent"] == pytest.approx(-math.log(p["lr_at"] / base) / math.log(4))
    assert both["horizon"]["tokens"] == shipped["data"]["tokens"]
    assert f"goes with the run's length as D^-g, g = {both['horizon']['exponent']:.2f} (the mean of 1 " \
        "(arch, size) pairs" in "\n".join(outputs.summary_lines(both))
    assert both["horizon"]["exponent_ci"] is None  # one pair: no interval
    gdn_check = dict(arch="gdn", tokens=study.tokens, factor=4.0, cells=[],
                     sizes={"d16": {"rule_lr": 0.01, "lr_opt": 0.005, "ratio": 0.5, "lr_edge": False}})
    given = {**both, "archs": {**both["archs"], "gdn": {"same_as": "llama", "check": {
        "own_rule": False, "sizes": {"d16": {"lr_opt": 0.01, "ratio": 1.0}}}}},
             "horizon_checks": both["horizon_checks"] + [gdn_check]}
    two = outputs.horizon_file(study, given, loss, llama_rows)  # gdn's pair kept (g = 0.5), llama's again
    assert sorted(q["arch"] for q in two["horizon"]["pairs"]) == ["gdn", "llama"]
    g = two["horizon"]["exponent"]
    lo, hi = two["horizon"]["exponent_ci"]
    assert g == pytest.approx((0.5 + p["exponent"]) / 2) and lo < g < hi
    assert f"95 % [{lo:+.2f}, {hi:+.2f}]" in "\n".join(outputs.summary_lines(two))
    study.tune.check_archs = "gdn"
    study.tokens = shipped["data"]["tokens"]  # at the file's budget: the planted rate is 7x the rule's
    loss, _ = run_planted(study)
    with pytest.raises(TuneConfigError, match="gdn needs its own rule.*tune.check_sizes='d16' gives 1; add a size"):
        outputs.rule_file(study, loss, {}, float("nan"), 0, rows)
