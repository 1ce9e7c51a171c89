"""The study's smaller comparisons and steps on planted laws: checkpoint smoothness, the held-out
files and report section, the held-out errors' systematic bias, the fits the study calls, and the
retrieval probes measured only where they can pass (their positive controls, NIAH within the
trained context)."""

import numpy as np

from linscale_jax.fit.synthetic import Law, planted_table
from linscale_jax.fit.table import from_columns
from linscale_jax.study.scaling import compare

COLS = ("arch", "run", "step", "n_params", "tokens", "flops", "loss")


def test_checkpoint_sd_measures_planted_noise():
    t = planted_table(Law(), sizes=np.geomspace(1e6, 1e8, 5), noise=0.01, seed=0, tokens_per_param=(100, 2000))
    got = compare.checkpoint_sd(t)["planted"]
    want = 0.01 * float(np.median(t.loss[t.step > 15]))  # ln-noise 0.01 -> about 0.01 x loss nats
    assert 0.6 * want < got["sd"] < 1.5 * want and 0.3 < got["rise"] < 0.7
    short = planted_table(Law(), sizes=np.geomspace(1e6, 1e8, 3), points_per_run=5, seed=0)
    assert compare.checkpoint_sd(short)["planted"] == {"sd": None, "rise": None}  # too short to measure


def test_study_holdout_files_and_report_section(tmp_path):
    from linscale_jax.fit import holdout as fit_holdout
    from linscale_jax.fit.bootstrap import SeedSd
    from linscale_jax.study.scaling import holdout

    t = planted_table(Law(), arch="llama", sizes=np.geomspace(1e6, 1e8, 4), noise=0.005, seed=0)
    out = holdout.write(t, SeedSd(0.01, 4, "measured"), str(tmp_path), n_boot=20, seed=0)
    row = out["rows"][0]
    assert row["inside"] and row["n_sizes_fit"] == 3 and row["failed"] <= 0.1 and out["seed_sd"]["df"] == 4
    assert (tmp_path / "holdout.csv").read_text().splitlines()[0] == \
        "arch,n_params,tokens,predicted,ci_low,ci_high,actual"
    text = "\n".join(holdout.report_section(str(tmp_path)))
    assert "| llama |" in text and "**yes**" in text and "reports no extrapolation accuracy" in text
    assert "0.01 nats (measured, 95% interval [" in text
    fit_holdout.plot(tmp_path / "holdout_curves.csv", t, tmp_path / "holdout.png")
    assert (tmp_path / "holdout.png").stat().st_size > 1000


def test_study_fit_laws_calls_the_fit_library_and_lists_unfittable_archs(tmp_path):
    import json

    import ml_collections

    from linscale_jax.fit.table import write_csv
    from linscale_jax.study.scaling import runner

    good = planted_table(Law(), arch="llama", sizes=np.geomspace(1e6, 1e8, 6), seed=0)
    tiny = planted_table(Law(), arch="tnl", sizes=np.geomspace(1e6, 1e7, 2), seed=1)  # 2 runs: no envelope
    write_csv(from_columns("t", **{c: np.concatenate([getattr(good, c), getattr(tiny, c)]) for c in COLS}),
              tmp_path / "table.csv")
    study = ml_collections.ConfigDict(dict(fit=dict(bootstrap=4, seed=0, include_clamped=False)))
    lines = []
    errors = runner.fit_laws(study, str(tmp_path / "table.csv"), str(tmp_path / "fit"), 1, log=lines.append)
    assert set(errors) == {"tnl"}
    fits = json.loads((tmp_path / "fit" / "fits.json").read_text())
    assert set(fits) == {"llama"} and fits["llama"]["info"]["compute_unit"] == "pf-days"
    assert fits["llama"]["info"]["bootstrap"]["resamples"] == 4
    assert json.loads((tmp_path / "fit" / "errors.json").read_text()) == errors
    assert (tmp_path / "fit" / "curves.png").is_file()
    assert len(lines) == 3 and lines[1].startswith("[study] fit llama: L(C) = ")  # one line per arch


def test_held_out_bias_names_errors_of_one_sign():
    from scipy import stats

    from linscale_jax.study.scaling import holdout

    b = holdout.bias([0.05, 0.07, 0.02, 0.04], ["a", "a", "b", "b"])
    half = stats.t.ppf(0.975, 1) * np.std([0.06, 0.03], ddof=1) / np.sqrt(2)  # t over the archs' means
    assert b["n"] == 4 and b["archs"] == 2 and b["same_sign"] and b["sign_p"] == 0.5
    assert np.isclose(b["mean"], 0.045) and np.allclose(b["ci95"], [0.045 - half, 0.045 + half])
    assert "**all 4 share one sign** (above: the law under-predicts" in holdout.bias_text(b)
    assert " nats over 4 held-out errors (2 archs)" in holdout.bias_text(b)
    mixed = holdout.bias([0.05, -0.07, 0.02], ["a", "b", "c"])
    assert not mixed["same_sign"] and mixed["sign_p"] is None and "one sign" not in holdout.bias_text(mixed)
    assert " nats over 3 held-out errors (one per arch)" in holdout.bias_text(mixed)
    assert holdout.bias([], []) == {"n": 0}


def test_probe_comparisons_need_their_positive_control():
    niah = compare.niah_comparison({"llama": np.array([0.0, 1.0, 0.5]), "tnl": np.zeros(3)}, n_boot=200)
    assert niah["control"]["met"] and niah["not_measured"] is None
    assert np.isclose(niah["minus_baseline"]["tnl"][0], 0.5)
    six_of_seven = (9 * 6 / 7) / 9  # the best a wrong number scores: not a retrieval
    niah = compare.niah_comparison({"llama": np.full(3, six_of_seven), "tnl": np.zeros(3)}, n_boot=50)
    assert not niah["control"]["met"] and niah["minus_baseline"] == {}
    assert niah["not_measured"].startswith("the positive control failed: llama's model retrieves no needle")
    probe = compare.probe_comparison({"llama": 0.9, "tnl": 0.5}, {"llama": 64, "tnl": 64})
    assert probe["control"]["met"] and np.isclose(probe["minus_baseline"]["tnl"][0], 0.4)
    probe = compare.probe_comparison({"llama": 0.3, "tnl": 0.5}, {"llama": 64, "tnl": 64}, chance=0.25)
    assert probe["minus_baseline"] == {} and "not above chance, 0.25" in probe["not_measured"]
    assert compare.probe_comparison({"tnl": 0.5}, {"tnl": 64})["not_measured"] == "no llama run to serve as the positive control"


def test_niah_runs_only_where_its_prompt_fits_the_trained_context(tmp_path):
    import pytest

    from linscale_jax.eval import niah
    from linscale_jax.study.presets import preset
    from linscale_jax.study.scaling import plan, runner

    study = preset("cpu")
    run = plan.build_plan(study, str(tmp_path))[-1]
    why = plan.niah_unmeasured(run.config)
    assert "do not fit in the trained context of 128 tokens" in why and runner.final_tasks(study, run) == ["probe"]
    run.config.train.seq_len = 256
    assert plan.niah_unmeasured(run.config) is None and runner.final_tasks(study, run) == ["niah", "probe"]
    assert runner.eval_context(study, run)["niah_in_context"]
    lengths, depths = niah.context_grid(256, 5, 3, min_len=130)
    assert lengths[0] == 130 and lengths[-1] == niah.in_context_max(256) == 256 - 1 - niah.ANSWER_TOKENS
    with pytest.raises(ValueError, match="do not fit in the trained context of 128 tokens"):
        niah.context_grid(128, 5, 3, min_len=129)


def test_niah_counts_only_cells_within_the_trained_context(tmp_path):
    import json
    from types import SimpleNamespace

    import ml_collections

    from linscale_jax.study.scaling import results

    rows = []
    for a, first in (("llama", 10.0), ("tnl", 1.0)):  # scores 1..10; the 200-token row all exact
        (tmp_path / a).mkdir()
        (tmp_path / a / "h.json").write_text(json.dumps({"lengths": [100, 200], "depths": [0, 100],
                                                         "scores": [[first, 1.0], [10.0, 10.0]]}))
        rows.append(dict(name=f"{a}-d64", arch=a, seed=0, n_params=1e5, niah_heatmap=f"{a}/h.png", probe_acc=None))
    runs = [SimpleNamespace(name=r["name"], config=ml_collections.ConfigDict({"train": {"seq_len": 128}}))
            for r in rows]
    got = results.probes(rows, str(tmp_path), 0, runs)["niah"]
    assert got["by_arch"]["llama"][0] == 0.5 and got["by_arch"]["tnl"][0] == 0.0 and got["control"]["met"]
    assert np.isclose(got["minus_baseline"]["tnl"][0], 0.5)
