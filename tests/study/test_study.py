"""The scaling study: the quick preset (unchanged) end to end (report.md, fits.json, PNGs), resume after a
stop without recomputing finished work, shards partitioning the runs, and the paper preset's
dry run (24 runs, compute totals = the Table-1 formula)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from linscale_jax.study import experiments
from linscale_jax.study.presets import preset
from linscale_jax.study.scaling import plan, runner

ROOT = Path(__file__).resolve().parents[2]
PF_DAY = 8.64e19



def _snapshot(run):
    ck = Path(run.workdir) / "checkpoints"
    return ({p.name: p.stat().st_mtime_ns for p in ck.iterdir()},
            (Path(run.workdir) / "eval" / "results.jsonl").read_text(),
            (Path(run.workdir) / "metrics.jsonl").read_text())


@pytest.mark.slow  # the real quick preset, about 5 minutes on 2 cores
def test_quick_study_stops_resumes_and_reports(tmp_path):
    study, wd = preset("quick"), str(tmp_path / "study")  # the real preset (~4-5 min on 2 cores)
    first = experiments.run(study, wd, experiments.Options(max_runs=1))
    assert first["stopped"] and first["processed"] == 1
    runs = plan.build_plan(study, wd)
    assert runner.trained(runs[0]) and not any(runner.trained(r) for r in runs[1:])
    before = _snapshot(runs[0])
    rows0 = before[1].splitlines()
    assert {json.loads(r)["task"] for r in rows0} == {"val_loss"}  # d32 is not the largest: no NIAH
    assert len(rows0) == len(os.listdir(Path(runs[0].workdir) / "checkpoints"))
    assert sorted(os.listdir(Path(runs[0].workdir) / "cooldowns")) == ["12", "24", "48"]

    out = experiments.run(study, wd)
    assert not out["stopped"] and all(runner.trained(r) for r in runs)
    assert _snapshot(runs[0]) == before  # not retrained, not re-evaluated

    import csv

    steps_all = {int(r["step"]) for r in csv.DictReader(open(Path(wd) / "table.csv"))}
    steps_fit = {int(r["step"]) for r in csv.DictReader(open(Path(wd) / "fit" / "table.csv"))}
    warmup = study.overrides.optim.warmup_steps
    assert min(steps_all) < warmup <= min(steps_fit) and steps_fit == {s for s in steps_all if s >= warmup}
    fits = json.loads((Path(wd) / "fit" / "fits.json").read_text())
    assert set(fits) == {"llama", "tnl", "hgrn2", "cosformer2"}
    for law in ("L_C", "N_opt_C", "D_opt_C"):
        assert fits["llama"][law]["ci95"]["exponent"] is not None
    assert fits["llama"]["L_C"]["exponent"] < 0  # loss falls with compute
    report = (Path(wd) / "report.md").read_text()
    for needle in ("Scale difference from the paper", "Table 3", "Lowest loss at the largest common compute",
                   "Exponents side by side", "Retrieval, NIAH", "Line probe", "llama-hgrn2", "N_opt(C)",
                   "How well the envelope brackets the optimum", "## Noise", "Held-out prediction of the largest size",
                   "fitted L(C) at that C", "The paper's findings in miniature", "## Wall time",
                   "worker process(es)"):
        assert needle in report, needle
    hold = list(csv.DictReader(open(Path(wd) / "holdout.csv")))
    assert list(hold[0]) == ["arch", "n_params", "tokens", "predicted", "ci_low", "ci_high", "actual"]
    assert {r["arch"] for r in hold} == set(fits) and "report/holdout.png" in report
    cool = list(csv.DictReader(open(Path(wd) / "fit" / "table_cooldown.csv")))  # 3 branches per run
    assert {int(r["step"]) for r in cool} == {12 + 1, 24 + 2, 48 + 5}
    assert len(cool) == 3 * len(runs) and {r["seed"] for r in cool} == {"0", "1"}
    # python -m linscale_jax.study.scaling.verdicts on the study's tables gives the report's verdicts
    from linscale_jax.study.scaling import verdicts

    found = json.loads((Path(wd) / "findings.json").read_text())["findings"]
    res = verdicts.judge_all(verdicts.load_tables([f"val_loss={wd}/fit/table.csv",
                                                   f"cooldown={wd}/fit/table_cooldown.csv"]),
                             margin=study.verdicts.margin, tolerance=study.verdicts.tolerance,
                             seed_sd=study.noise.seed_sd, n_boot=study.fit.bootstrap, seed=study.fit.seed)
    for key in ("power_laws", "equal_compute"):
        assert res["findings"][key]["verdict"] == found[key]["verdict"]
        assert {a: r["verdict"] for a, r in res["findings"][key]["archs"].items()} == \
            {a: r["verdict"] for a, r in found[key]["archs"].items()}
    pngs = re.findall(r"\]\(([^)]+\.png)\)", report)
    assert len(pngs) >= 6 and all((Path(wd) / p).is_file() for p in pngs), pngs
    largest = [r for r in runs if r.size == "d64"]
    for r in largest:
        tasks = {json.loads(x)["task"] for x in (Path(r.workdir) / "eval" / "results.jsonl").read_text().splitlines()}
        assert {"val_loss", "niah", "probe"} <= tasks

    assert set(json.loads((Path(wd) / "findings.json").read_text())["findings"]) == {
        "power_laws", "equal_compute", "retrieval"}
    timing = [json.loads(x) for x in (Path(runs[-1].workdir) / "timing.jsonl").read_text().splitlines()]
    assert timing[0]["trained"] and timing[0]["train_s"] > timing[0]["train_compile_s"] > 0
    assert (Path(runs[-1].workdir) / "study.log").is_file()  # trained by a worker process (workers = 2)
    done = [_snapshot(r) for r in runs]
    again = experiments.run(study, wd)  # everything done: nothing retrained or re-evaluated
    assert again["processed"] == len(runs) and [_snapshot(r) for r in runs] == done


def test_shards_partition_the_runs(tmp_path):
    runs = plan.build_plan(preset("quick"), str(tmp_path))
    assert len(runs) == 16 and len({r.steps for r in runs}) == 1  # one token budget for all sizes
    assert [r.name for r in runs if r.seed] == [f"{a}-d32-seed1" for a in ("llama", "tnl", "hgrn2", "cosformer2")]
    parts = [experiments.shard(runs, f"{i}/3") for i in range(3)]
    assert sorted(r.index for p in parts for r in p) == list(range(16))
    assert all(r.index % 3 == i for i, p in enumerate(parts) for r in p)
    with pytest.raises(ValueError, match="i/n"):
        experiments.parse_shard("3")
    with pytest.raises(ValueError, match="0 <= i < n"):
        experiments.parse_shard("3/3")


def table1_flops_per_token(arch, l, d, h, n=8192):
    x = {"llama": n / (6 * d) + 5 / (18 * d), "tnl": 1 / (2 * h) + 5 / (18 * d),
         "hgrn2": 1 / (3 * h) + 29 / (72 * d), "cosformer2": 3 / (4 * h) + 23 / (72 * d)}[arch]
    return 72.0 * l * d * d * (1 + x)


def test_paper_dry_run_prints_24_runs_with_table1_compute(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "linscale_jax.study", "--config=configs/study/paper.py",
         f"--workdir={tmp_path}", "--dry_run"], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = re.findall(r"^\[\s*\d+\] (\S+)\s+N=\S+ steps=(\d+) tokens=\S+ C=(\S+) PF-days", out.stdout, re.M)
    assert len(lines) == 24
    shapes = {"70m": (6, 512), "160m": (12, 768), "410m": (26, 1024), "1b": (32, 1536), "3b": (35, 2560),
              "7b": (32, 4096)}
    want_total = 0.0
    for name, steps, c in lines:
        arch, size = name.split("-")
        l, d = shapes[size]
        l = 25 if size == "410m" and arch in ("tnl", "cosformer2") else l
        assert int(steps) == 76294  # ceil(300e9 / (480 * 8192))
        want = table1_flops_per_token(arch, l, d, d // 128) * int(steps) * 480 * 8192 / PF_DAY
        assert float(c) == pytest.approx(want, rel=1e-3)
        want_total += want
    total = float(re.search(r"^total: 24 runs, \S+ tokens, (\S+) PF-days", out.stdout, re.M).group(1))
    assert total == pytest.approx(want_total, rel=1e-5)
    assert out.stdout.count("python -m linscale_jax.train --config=paper:") == 24  # the packaged configs/paper.py
