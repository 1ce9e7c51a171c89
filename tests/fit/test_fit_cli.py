"""`python -m linscale_jax.fit` end to end on a small synthetic table: fits.json layout and the PNGs."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from linscale_jax.fit import cli, synthetic, table

REPO = Path(__file__).resolve().parents[2]
LAW_KEYS = {"coefficient", "exponent", "ci95"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def table_csv(tmp_path_factory):
    sizes = np.geomspace(1e6, 1e8, 8)
    parts = [synthetic.planted_table(synthetic.Law(A=a), arch=arch, sizes=sizes, seed=i,
                                     points_per_run=15)
             for i, (arch, a) in enumerate((("tnl", 480.0), ("llama", 400.0)))]
    cols = {c: np.concatenate([getattr(p, c) for p in parts]) for c in table.COLUMNS}
    path = tmp_path_factory.mktemp("table") / "runs.csv"
    table.write_csv(table.from_columns("cli", **cols), path)
    return path


def _check_law(law, extra=()):
    assert set(law) == LAW_KEYS | set(extra)
    assert set(law["ci95"]) == {"coefficient", "exponent", *extra}
    for lo_hi in law["ci95"].values():
        assert len(lo_hi) == 2 and lo_hi[0] <= lo_hi[1]


def _pngs(out: Path, names):
    for name in names:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000, name


def test_cli_approach1_subprocess(table_csv, tmp_path):
    out = tmp_path / "a1"
    proc = subprocess.run(
        [sys.executable, "-m", "linscale_jax.fit", f"--table={table_csv}", "--approach=1", f"--out={out}",
         "--compute_unit=pf-days", "--bootstrap=8", "--seed=3"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "N_opt_C" in proc.stdout and "excluded C in" in proc.stdout
    fits = json.loads((out / "fits.json").read_text())
    assert set(fits) == {"tnl", "llama"}
    for arch, entry in fits.items():
        assert set(entry) == {"L_C", "N_opt_C", "D_opt_C", "excluded", "info"}
        for k in ("L_C", "N_opt_C", "D_opt_C"):
            _check_law(entry[k])
        assert entry["info"]["compute_unit"] == "pf-days"
        assert entry["info"]["bootstrap"]["resamples"] == 8
        assert entry["excluded"]["applied"] and entry["excluded"]["ranges"]
        # C in PF-days: the planted N_opt exponent is unit-free, the coefficient is not.
        assert 0.4 < entry["N_opt_C"]["exponent"] < 0.65
        assert entry["N_opt_C"]["coefficient"] > 1e7
    _pngs(out, ("curves.png", "allocation.png", "paper_overlay.png"))


def test_cli_approach2_and_3_in_process(table_csv, tmp_path, capsys):
    out2 = tmp_path / "a2"
    assert cli.main([f"--table={table_csv}", "--approach=2", f"--out={out2}",
                     "--bootstrap=6", "--irreducible", "--arch=tnl"]) == 0
    fits2 = json.loads((out2 / "fits.json").read_text())
    assert set(fits2) == {"tnl"}
    entry = fits2["tnl"]
    assert set(entry) == {"L_C", "N_opt_C", "D_opt_C", "optima", "excluded", "info"}
    _check_law(entry["L_C"], extra=("irreducible",))
    _check_law(entry["N_opt_C"])
    assert len(entry["optima"]) == entry["excluded"]["budgets_used"] >= 3
    _pngs(out2, ("curves.png", "allocation.png", "paper_overlay.png", "isoflop.png"))

    out3 = tmp_path / "a3"
    assert cli.main([f"--table={table_csv}", "--approach=3", f"--out={out3}",
                     "--bootstrap=4"]) == 0
    fits3 = json.loads((out3 / "fits.json").read_text())
    for entry in fits3.values():
        assert set(entry) == {"E", "A", "B", "alpha", "beta", "a", "ci95", "huber_loss", "L_C",
                              "N_opt_C", "D_opt_C", "info"}
        assert set(entry["ci95"]) == {"E", "A", "B", "alpha", "beta", "a"}
        assert entry["alpha"] == pytest.approx(0.34, abs=0.02)
        _check_law(entry["N_opt_C"])
        assert entry["info"]["flops_per_param_token"] == 6.0
    _pngs(out3, ("curves.png", "allocation.png", "paper_overlay.png"))
    assert "alpha" in capsys.readouterr().out


def test_cli_reports_errors(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("arch,run,step,n_params,tokens,loss\ntnl,a,1,1,1,1\n")
    assert cli.main([f"--table={bad}", "--approach=1", f"--out={tmp_path / 'o'}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ERROR: ") and "missing column(s) flops" in err and err.count("\n") == 1
    good = tmp_path / "good.csv"
    table.write_csv(synthetic.planted_table(arch="tnl", sizes=[1e6, 2e6, 4e6], points_per_run=5),
                    good)
    assert cli.main([f"--table={good}", "--approach=1", f"--out={tmp_path / 'o'}",
                     "--arch=llama"]) == 1
    assert "not in" in capsys.readouterr().err
