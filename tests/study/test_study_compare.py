"""The study's smaller comparisons and steps on planted laws: checkpoint smoothness, the held-out
files and report section, and the fits the study calls."""

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
