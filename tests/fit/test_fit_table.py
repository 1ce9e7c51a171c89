"""Input loading (CSV, JSONL, trainer workdirs) and the errors for bad input or too little data."""

import json

import numpy as np
import pytest

from linscale_jax.fit import approach1, approach2, approach3, powerlaw, synthetic, table
from linscale_jax.fit.table import FitError

HEADER = "arch,run,step,n_params,tokens,flops,loss\n"


def _write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _rows(n_runs=3, points=4, **override):
    out = []
    for r in range(n_runs):
        n = 1e6 * 4**r
        for s in range(1, points + 1):
            row = {"arch": "tnl", "run": f"r{r}", "step": s, "n_params": n, "tokens": 1e7 * s,
                   "flops": 6 * n * 1e7 * s, "loss": 5.0 - 0.3 * r - 0.1 * s}
            out.append({**row, **override} if (r, s) == (1, 2) else row)
    return out


def _csv(rows):
    cols = table.COLUMNS
    return HEADER + "".join(",".join(str(row[c]) for c in cols) + "\n" for row in rows)


def test_csv_and_jsonl_round_trip(tmp_path):
    t = table.load(_write(tmp_path, _csv(_rows())))
    assert len(t) == 12 and t.archs == ["tnl"] and [n for n, _ in t.runs()] == ["r0", "r1", "r2"]
    j = _write(tmp_path, "\n".join(json.dumps({**r, "lr": 1e-3}) for r in _rows()), "t.jsonl")
    t2 = table.load(j)
    np.testing.assert_array_equal(t.loss, t2.loss)
    table.write_csv(t, tmp_path / "back.csv")
    np.testing.assert_array_equal(table.load(tmp_path / "back.csv").flops, t.flops)
    assert t.with_compute_unit("pf-days").flops[0] == pytest.approx(t.flops[0] / 8.64e19)


def test_trainer_workdirs(tmp_path):
    for r in range(3):
        d = tmp_path / f"run{r}"
        d.mkdir()
        lines = [{"step": s, "loss": 4.0 - 0.1 * s - 0.2 * r, "tokens": 1e6 * s,
                  "flops": 6e12 * s * 4**r, "lr": 1e-3} for s in range(1, 5)]
        lines.insert(2, {"step": 2, "val_loss": 3.9})  # periodic eval lines carry no loss
        (d / "metrics.jsonl").write_text("\n".join(map(json.dumps, lines)))
        (d / "run.json").write_text(json.dumps({"arch": "hgrn2", "n_params": 1e6 * 4**r}))
    t = table.load(tmp_path)
    assert len(t) == 12 and t.archs == ["hgrn2"]
    assert sorted(set(t.run.tolist())) == ["run0", "run1", "run2"]
    single = table.load(tmp_path / "run1" / "metrics.jsonl")  # one workdir's file
    assert len(single) == 4 and single.n_params[0] == 4e6 and single.run[0] == "run1"
    (tmp_path / "run2" / "run.json").unlink()
    with pytest.raises(FitError, match="run.json"):
        table.load(tmp_path)


@pytest.mark.parametrize("text, match", [
    (HEADER.replace(",flops", ""), "missing column.*flops"),
    ("", "empty"),
    ("arch,run,step,n_params,tokens,flops,loss\ntnl,a,1,1e6,1e7,6e13,abc\n", "not a number"),
])
def test_bad_files(tmp_path, text, match):
    with pytest.raises(FitError, match=match):
        table.load(_write(tmp_path, text))


@pytest.mark.parametrize("override, match", [
    ({"loss": float("nan")}, "NaN"),
    ({"tokens": 0}, "tokens <= 0.*drop those rows"),
    ({"loss": -1.0}, "loss <= 0"),
    ({"n_params": 123.0}, "several n_params"),
])
def test_bad_values(tmp_path, override, match):
    with pytest.raises(FitError, match=match):
        table.load(_write(tmp_path, _csv(_rows(**override))))


def test_missing_path_and_format(tmp_path):
    with pytest.raises(FitError, match="does not exist"):
        table.load(tmp_path / "nope.csv")
    with pytest.raises(FitError, match="unknown table format"):
        table.load(_write(tmp_path, "x", "t.txt"))
    with pytest.raises(FitError, match="not UTF-8"):
        p = tmp_path / "bad.csv"
        p.write_bytes(b"\xff\xfe\x00bad")
        table.load(p)


def test_too_few_runs_and_points(tmp_path):
    two_runs = table.load(_write(tmp_path, _csv(_rows(n_runs=2))))
    with pytest.raises(FitError, match="at least 3 runs"):
        approach1.fit(two_runs)
    with pytest.raises(FitError, match="at least 3 runs"):
        approach2.fit(two_runs)
    one_point = table.load(_write(tmp_path, _csv(_rows(points=1))))
    with pytest.raises(FitError, match="needs at least 2"):
        approach1.fit(one_point)
    with pytest.raises(FitError, match="at least 6 points"):
        approach3.fit(one_point)
    with pytest.raises(FitError, match="at least 2 points with distinct x"):
        powerlaw.fit_power_law([1.0, 1.0], [2.0, 3.0])


def test_approach2_budgets_with_edge_minima():
    # Sizes far below the optimum: every IsoFLOP minimum sits at the largest size.
    t = synthetic.planted_table(sizes=[1e4, 2e4, 4e4, 8e4], tokens_per_param=(1e3, 1e5))
    with pytest.raises(FitError, match="kept 0 of"):
        approach2.fit(t)
    b = approach2.fit_budget(1e18, [1e6, 2e6, 4e6], [1e9, 5e8, 2.5e8], [3.0, 2.9, 2.8])
    assert b.status.startswith("minimum at the largest")


def test_recount_replaces_each_runs_parameter_count():
    t = synthetic.planted_table(sizes=[1e4, 2e4, 4e4], points_per_run=3)
    counts = {"planted": {1e4: 1.5e4, 2e4: 2.7e4, 4e4: 5.1e4}}
    r = table.recount(t, counts)
    assert sorted(set(r.n_params.tolist())) == [1.5e4, 2.7e4, 5.1e4]
    assert np.array_equal(r.loss, t.loss) and np.array_equal(r.run, t.run) and r.source == t.source
    with pytest.raises(FitError, match="no parameter count for planted at n_params=40000"):
        table.recount(t, {"planted": {1e4: 1.5e4, 2e4: 2.7e4}})
