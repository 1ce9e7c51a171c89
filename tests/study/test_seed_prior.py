"""study.scaling.seed_prior and fit.bootstrap.with_prior: other studies' seed sd of one design pooled
with a study's own unless an F test rejects one sd, the prior file built from finished studies, and
the packaged prior matching the main job's design."""

import json
import os
import types

import numpy as np
import pytest
from scipy import stats

from linscale_jax.fit import bootstrap as bs
from linscale_jax.study.scaling import seed_prior, verdicts

DESIGN = dict(archs=["llama", "tnl"], sizes=["d32l2", "d48l2"], tokens=100, tokens_by_size=None, steps="10",
              batch="4", seq_len=128, lr="0.003", b2="0.999", schedule="constant", warmup="4", protocol="tuned",
              data_task="stdlib", vocab="byte", vocab_size=264, fit_min_step=2, bootstrap=200, approach=1)


def test_with_prior_pools_or_keeps_the_own_sd_by_an_f_test():
    own, prior = bs.SeedSd(0.012, 12, "own"), bs.SeedSd(0.015, 36, "prior")
    sd, check = bs.with_prior(own, prior)
    assert sd.df == 48 and sd.sd == pytest.approx(np.sqrt((12 * 0.012**2 + 36 * 0.015**2) / 48))
    f = (0.012 / 0.015) ** 2
    assert check["used"] and check["f"] == pytest.approx(f)
    assert check["p"] == pytest.approx(2 * stats.f.cdf(f, 12, 36))
    # a prior 4x the own sd is rejected: the study keeps its own sd and says why
    sd, check = bs.with_prior(own, bs.SeedSd(0.048, 36, "prior"))
    assert not check["used"] and check["p"] < 1e-4 and (sd.sd, sd.df) == (0.012, 12) and "rejected" in sd.source
    # nothing measured here: the prior alone; no prior (or an assumed one): the own sd, no check
    sd, check = bs.with_prior(bs.SeedSd(0.0, 0, "none"), prior)
    assert (sd.sd, sd.df) == (0.015, 36) and check["p"] is None
    assert bs.SeedSd.of(sd.json()) == sd and bs.SeedSd.of(bs.SeedSd(0.02, np.inf, "x").json()).df == np.inf
    assert bs.with_prior(own, None) == (own, None) and bs.with_prior(own, bs.SeedSd(0.02, np.inf, "x")) == (own, None)


def test_bartlett_equals_scipys_on_raw_samples():
    rng = np.random.default_rng(0)
    groups = [rng.normal(0, s, n) for s, n in ((1.0, 13), (2.5, 13), (1.4, 9))]
    sds = [bs.SeedSd(float(np.std(g, ddof=1)), len(g) - 1, "g") for g in groups]
    assert bs.bartlett(sds) == pytest.approx(stats.bartlett(*groups).pvalue, rel=1e-9)
    assert bs.bartlett(sds[:1]) is None


def _table(seed, run_sd):
    from linscale_jax.fit.synthetic_study import study_table

    return study_table({"llama": 0.0, "tnl": 0.05}, sizes=(5e4, 1e5, 1.9e5, 3.2e5), tokens=1.57e6, points=6,
                       ckpt_sd=0.003, run_sd=run_sd, replicates={0: 2, 1: 2}, seed=seed)


def test_judge_draws_from_the_pooled_sd_and_its_intervals_agree_across_studies():
    # two studies of one design whose own 4-df sds differ 2x: with a 200-df prior their widths agree
    # within 1.5x; the positive control: without it they do not
    def width(t, prior):
        r = verdicts.judge(t, n_boot=300, holdout=False, linear=("tnl",), prior=prior)
        row = r["equal_compute"]["archs"]["tnl"]
        return row["ci_high"] - row["ci_low"], r

    a, b = _table(3, 0.02), _table(4, 0.02)
    own = [verdicts.prepare(t)["own"] for t in (a, b)]
    assert max(s.sd for s in own) / min(s.sd for s in own) > 2
    (wa, _), (wb, _) = width(a, None), width(b, None)
    assert max(wa, wb) / min(wa, wb) > 1.5
    prior = bs.SeedSd(0.02, 200, "prior")
    (wa, ra), (wb, _) = width(a, prior), width(b, prior)
    assert max(wa, wb) / min(wa, wb) < 1.5
    assert ra["seed_sd_pooled"]["df"] == 204 and ra["seed_sd_own"]["df"] == 4 and ra["seed_sd_prior"]["used"]


def _finished(d, sd_val, sd_cool, design=DESIGN, df=12):
    os.makedirs(d)
    by = {e: {"seed_sd_pooled": {"sd": s, "df": df, "source": f"pooled: 2 archs, {df} df"}}
          for e, s in (("val_loss", sd_val), ("cooldown", sd_cool))}
    (d / "findings.json").write_text(json.dumps(dict(findings={}, estimators=["val_loss", "cooldown"], by_estimator=by,
                                                     design=design)))
    return str(d)


def test_build_pools_finished_studies_and_a_study_of_the_design_reads_it(tmp_path):
    dirs = [_finished(tmp_path / f"seed{i}", v, c) for i, (v, c) in enumerate(((0.01, 0.012), (0.02, 0.011)))]
    prior = seed_prior.build(dirs)
    assert [s["study"] for s in prior["studies"]] == ["seed0", "seed1"]
    assert prior["pooled"]["val_loss"]["df"] == 24
    assert prior["pooled"]["val_loss"]["sd"] == pytest.approx(np.sqrt((0.01**2 + 0.02**2) / 2))
    assert prior["pooled"]["val_loss"]["bartlett_p"] < prior["pooled"]["cooldown"]["bartlett_p"]
    path = tmp_path / "prior.json"
    assert "24 df from 2 studies" in seed_prior.main(dirs, str(path))
    priors, note = seed_prior.for_design(str(path), dict(DESIGN, bootstrap=50))  # fit settings do not matter
    assert priors["cooldown"].df == 24 and "2 finished studies" in note
    priors, note = seed_prior.for_design(str(path), dict(DESIGN, sizes=["d32l2"], lr="0.001"))
    assert priors is None and "differs in sizes, lr" in note
    assert seed_prior.for_design("", DESIGN)[0] is None


def test_bad_inputs_name_the_problem_and_the_fix(tmp_path):
    a = _finished(tmp_path / "a", 0.01, 0.01)
    with pytest.raises(seed_prior.PriorError, match="2 or more finished studies"):
        seed_prior.build([a])
    with pytest.raises(seed_prior.PriorError, match="not a finished study"):
        seed_prior.build([a, str(tmp_path / "missing")])
    b = _finished(tmp_path / "b", 0.01, 0.01, design=dict(DESIGN, batch="8"))
    with pytest.raises(seed_prior.PriorError, match="differs in batch"):
        seed_prior.build([a, b])
    c = _finished(tmp_path / "c", 0.01, 0.01, df=0)
    with pytest.raises(seed_prior.PriorError, match="measured no seed sd.*study.replicates"):
        seed_prior.build([a, c])
    with pytest.raises(seed_prior.PriorError, match="not found.*seed_sd_prior"):
        seed_prior.read(str(tmp_path / "nothing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(seed_prior.PriorError, match="not JSON"):
        seed_prior.read(str(tmp_path / "bad.json"))
    (tmp_path / "nan.json").write_text(json.dumps(dict(design=DESIGN, pooled=dict(val_loss=dict(sd=float("nan"), df=12)))))
    with pytest.raises(seed_prior.PriorError, match="pooled.val_loss needs a finite sd"):
        seed_prior.read(str(tmp_path / "nan.json"))
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(seed_prior.PriorError, match="lacks 'pooled'"):
        seed_prior.read(str(tmp_path / "list.json"))


def test_the_packaged_prior_measures_the_main_jobs_design(tmp_path):
    from linscale_jax.study import presets
    from linscale_jax.study.scaling import plan, results

    study = presets.preset("cpu")
    design = results.design(study, plan.build_plan(study, str(tmp_path)))
    priors, note = seed_prior.for_design(study.noise.prior, design)
    assert priors is not None, note  # cpu.py changed: rebuild the prior (seed_prior's docstring)
    assert set(priors) == set(study.estimators.split(",")) and all(p.df >= 36 for p in priors.values())
    # the paper's protocol is another design: its studies keep their own sd
    paper = presets.preset("cpu_paper")
    other = results.design(paper, plan.build_plan(paper, str(tmp_path / "p")))
    assert seed_prior.for_design(paper.noise.prior, other)[0] is None


def test_the_report_says_when_a_study_has_only_the_prior():
    from linscale_jax.study.scaling import laws as console
    from linscale_jax.study.scaling.report import laws

    own, prior = bs.SeedSd(0.0, 0, "none"), bs.SeedSd(0.015, 36, "cpu_seed_sd: 3 studies")
    sd, check = bs.with_prior(own, prior)
    by = {"val_loss": dict(seed_sd={"llama": own.json()}, seed_sd_own=own.json(), seed_sd_prior=check,
                           seed_sd_pooled=sd.json())}
    found = dict(estimators=["val_loss"], by_estimator=by, seed_sd_prior="prior cpu_seed_sd")
    text = "\n".join(laws.noise(types.SimpleNamespace(found=found)))
    assert "| this study, pooled over the archs | not measured (no replicate runs) |" in text
    assert "| **pooled (the draws')** | 0.0150 (36 df)" in text and "trains no replicate seeds" in text
    assert console.seed_sd_line(found) == ("[study] seed sd the intervals use: val_loss 0.0150 (36 df): the prior "
                                           "alone (cpu_seed_sd: 3 studies; this study trains no replicates)")


def test_the_report_shows_the_own_the_prior_and_the_pooled_sd():
    from linscale_jax.study.scaling.report import laws

    own, prior = bs.SeedSd(0.012, 12, "own"), bs.SeedSd(0.015, 36, "cpu_seed_sd: 3 studies")
    sd, check = bs.with_prior(own, prior)
    by = {"val_loss": dict(seed_sd={"llama": own.json()}, seed_sd_own=own.json(), seed_sd_prior=check,
                           seed_sd_pooled=sd.json())}
    doc = types.SimpleNamespace(found=dict(estimators=["val_loss"], by_estimator=by, seed_sd_prior="prior cpu_seed_sd"))
    text = "\n".join(laws.noise(doc))
    assert "| prior (other studies of this design) | 0.0150 (36 df; F 0.64, p 0.41): pooled |" in text
    assert "0.0143 (48 df)" in text and "Seed sd prior (study.noise.prior): prior cpu_seed_sd." in text


def test_the_command_writes_the_prior_and_asks_for_two_studies(tmp_path):
    import subprocess
    import sys

    from helpers.study import env

    a, b = _finished(tmp_path / "seed0", 0.01, 0.012), _finished(tmp_path / "seed7", 0.02, 0.011)
    cmd = [sys.executable, "-m", "linscale_jax.study", "seed_sd_prior", f"--workdir={a}"]
    out = subprocess.run([*cmd, f"--workdir={b}", f"--out={tmp_path / 'p.json'}"], env=env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "val_loss: seed sd 0.0158 on 24 df from 2 studies" in out.stdout
    assert json.loads((tmp_path / "p.json").read_text())["pooled"]["cooldown"]["df"] == 24
    out = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "seed_sd_prior needs two or more --workdir" in out.stderr
