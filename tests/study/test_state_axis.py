"""State size as an axis (study.scaling.state_axis, report.state): families of labels sharing a
mixer, the loss per doubling of the state at equal compute recovered from planted runs with its
interval and verdict, MQAR accuracy against the usable state from a recall.csv, "needs two state
sizes" instead of a fit when a family has one state per size, and the report's section and figure."""

import csv
import types

import numpy as np
import pytest

from linscale_jax.study.scaling import state_axis
from linscale_jax.study.scaling.report import state as state_report

SIZES = {"d16": (1.5e4, 4e-9), "d32": (5.5e4, 1.4e-8), "d48": (1.2e5, 3e-8)}


def planted_runs(slope: float, noise: float = 0.004, labels=(("gdn", 1.0), ("gdn+expand_v=1", 0.57))):
    """Runs of one family: loss = 3 − 0.1·ln C + slope·log2 S + noise; the variant has a smaller
    state (and a little less compute) at every size, a replicate seed at d16."""
    rng = np.random.default_rng(0)
    runs = []
    for label, ratio in labels:
        for size, (n, c) in SIZES.items():
            for seed in ((0, 1) if size == "d16" else (0,)):
                s = 700.0 * n / 1.5e4 ** 0.5 / 122 * ratio
                cc = c * (0.85 if ratio < 1 else 1.0)
                loss = 3.0 - 0.1 * np.log(cc) + slope * np.log2(s) + rng.normal(0, noise)
                runs.append(dict(name=f"{label}-{size}", arch=label, size=size, seed=seed, n_params=n * (0.85 if ratio < 1
                                 else 1.0), pf_days=cc, val_loss=float(loss), state_floats_per_layer=s))
    return runs


def test_a_family_is_the_label_less_its_state_resizing_changes():
    assert state_axis.family("gdn+expand_v=1") == state_axis.family("gdn") == "gdn"
    assert state_axis.family("tnl+n_heads=4") == "tnl"
    assert state_axis.family("tnl+short_conv=4+n_heads=2") == "tnl+short_conv=4"
    assert state_axis.family("gdn+hybrid=3:1") == "gdn+hybrid=3:1"  # another mixer pattern, another family


@pytest.mark.parametrize("slope, verdict", [(-0.05, "better"), (0.05, "worse"), (0.0, "equivalent")])
def test_the_loss_per_doubling_of_the_state_is_recovered_with_its_verdict(slope, verdict):
    fit = state_axis.loss_fits(planted_runs(slope), margin=0.05)
    (f,) = fit
    e = f["compute"]
    assert f["family"] == "gdn" and f["runs"] == 8 and e["status"] == "fitted" and e["dof"] == 5
    assert e["ci_low"] < slope < e["ci_high"] and e["ci_high"] - e["ci_low"] < 0.04
    assert e["verdict"] == verdict
    assert f["params"]["status"] == "fitted"  # the same beside N


def test_one_state_per_size_needs_two_state_sizes_not_a_fit():
    runs = planted_runs(-0.05, labels=(("tnl", 1.0),))
    assert state_axis.loss_fits(runs, 0.05)[0]["status"] == state_axis.NEEDS_TWO
    # a variant that leaves the state as it is (same floats at every size) is no second state
    same = planted_runs(-0.05, labels=(("tnl", 1.0), ("tnl+n_heads=2", 1.0)))
    assert state_axis.loss_fits(same, 0.05)[0]["status"] == state_axis.NEEDS_TWO
    # two states but three runs: no spare degree of freedom for three parameters, no interval
    few = [r for r in planted_runs(-0.05) if r["size"] == "d16" and not r["seed"]] + planted_runs(-0.05)[3:4]
    got = state_axis.loss_fits(few, 0.05)[0]
    assert got["status"] == "not_resolved" and got["compute"]["reason"] == "3 runs for 3 parameters"


def write_recall_csv(path, slope=0.15):
    """recall.csv (study.recall.table.COLUMNS) for gdn and gdn+expand_v=1 at two widths: accuracy
    rising by `slope` per doubling of the usable state; llama at one state."""
    from linscale_jax.study.recall.table import COLUMNS

    rows = []
    for label, ratio in (("gdn", 1.0), ("gdn+expand_v=1", 0.5)):
        for d, n in ((32, 30000), (64, 110000)):
            u = int(64 * d * ratio)
            acc = min(0.99, 0.2 + slope * np.log2(u / 1024))
            for seed in ("0", "all"):
                rows.append(dict(arch=label, d_model=d, n_pairs=8, seq_len=64, accuracy=f"{acc:.3f}",
                                 ci_low=f"{acc - 0.04:.3f}", ci_high=f"{acc + 0.04:.3f}", state_floats=u, seed=seed,
                                 status="recall", head_dim=16, n_layers=4, lr=0.001, steps=1000, test_loss=0.5,
                                 queries=512, n_params=int(n * (0.8 if ratio < 1 else 1)),
                                 variant="expand_v=1" if ratio < 1 else "", usable_state_floats=u, max_steps=1000))
    rows.append(dict(rows[1], arch="llama", variant=""))  # a seed-mean cell at one state
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows({k: r[k] for k in COLUMNS} for r in rows)
    return str(path)


def test_mqar_accuracy_against_the_usable_state_from_recall_csv(tmp_path):
    path = write_recall_csv(tmp_path / "recall.csv", slope=0.15)
    out = state_axis.fit(planted_runs(-0.05), path, margin=0.05)
    by = {r["family"]: r for r in out["recall"]}
    g = by["gdn"]
    assert g["status"] == "fitted" and g["labels"] == ["gdn", "gdn+expand_v=1"] and len(g["points"]) == 4
    assert g["ci_low"] < 0.15 < g["ci_high"] and g["verdict"] == "raises"
    assert by["llama"]["status"] == state_axis.NEEDS_TWO
    assert out["recall_source"] == path and state_axis.fit(planted_runs(-0.05))["recall"] == []


def doc(tmp_path, found):
    (tmp_path / "report").mkdir(exist_ok=True)
    return types.SimpleNamespace(workdir=str(tmp_path), found=found)


def test_the_section_renders_the_fits_and_the_figure(tmp_path):
    runs = planted_runs(-0.05) + planted_runs(0.0, labels=(("llama", 1.0),))
    found = dict(state_axis=state_axis.fit(runs, write_recall_csv(tmp_path / "recall.csv"), 0.05))
    d = doc(tmp_path, found)
    state_report.draw(d)
    assert (tmp_path / "report" / state_report.PNG).stat().st_size > 0
    text = "\n".join(state_report.section(d))
    assert text.startswith(state_report.TITLE)
    assert "| gdn | gdn, gdn+expand_v=1 | 8 |" in text and "more state lowers the loss" in text
    assert f"Not fitted, **{state_axis.NEEDS_TWO}** (one state per size): llama." in text
    assert "| gdn | 8 | gdn, gdn+expand_v=1 |" in text and "more state raises recall" in text
    assert "![state size](report/state.png)" in text
    (line,) = state_report.summary_line(d)
    assert line.startswith("- State size: loss per doubling") and "gdn -0.0" in line


def test_without_a_variant_the_section_says_it_needs_two_state_sizes(tmp_path):
    found = dict(state_axis=state_axis.fit(planted_runs(0.0, labels=(("tnl", 1.0),)), "", 0.05))
    d = doc(tmp_path, found)
    state_report.draw(d)
    text = "\n".join(state_report.section(d))
    assert f"**{state_axis.NEEDS_TWO}** in every family (tnl" in text and "not measured here" in text
    assert not (tmp_path / "report" / state_report.PNG).exists() and state_report.summary_line(d) == []
    assert state_report.section(doc(tmp_path, {})) == []  # findings.json written before the axis
