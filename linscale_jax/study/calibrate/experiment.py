"""The calibration as an experiment (kind "calibrate", study.experiments): one run per case.

    runs = plan(study, DIR)              # the four cases of the design (DIR: a finished scaling study)
    process_case(study, run, log, final)  # its simulated studies judged: <case>/counts.json
    joined = join(study, runs, DIR, ctx)  # DIR/calibration.json
    report(study, DIR, joined, ctx)       # DIR/report.md rendered again, the table printed
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import ml_collections

from linscale_jax import contract
from linscale_jax.study import files
from linscale_jax.study.calibrate import simulate

@dataclasses.dataclass
class Case:
    """One case of the design (the executor's run: name, workdir, steps, n_params, flops_exact)."""

    index: int  # in simulate.CASES
    name: str
    workdir: str  # DIR/calibration/<design>/<case>
    study_dir: str  # DIR, the finished scaling study
    steps: int  # simulated studies
    n_params: int = 0
    config: ml_collections.ConfigDict = dataclasses.field(  # no mesh: one process, any host
        default_factory=lambda: ml_collections.ConfigDict(dict(mesh={})))

    @property
    def flops_exact(self) -> float:  # the cost of a case, for longest-first order and the ETA
        return float(self.steps)


def replicates(study) -> tuple | None:
    """(sizes, seeds) of study.replicate_sizes / replicate_seeds; None: the study's own design."""
    sizes = contract.split_list(str(study.replicate_sizes))
    return (sizes, int(study.replicate_seeds)) if sizes else None


def truth(study) -> str:
    """study.true_seed_sd as given ("": the study's measured pooled sd)."""
    return str(study.get("true_seed_sd", "") or "")


def settings(study, found: dict) -> dict:
    """What a case's counts depend on (stored counts are reused while these hold)."""
    return dict(seeds=int(study.seeds), effect=float(study.effect), n_boot=int(study.bootstrap or found["n_boot"]),
                design=simulate.design_label(replicates(study), truth(study)), model=simulate.MODEL_VERSION)


def _design(study, workdir: str):
    return simulate.load_design(workdir, replicates(study), simulate.true_seed_sd(truth(study)))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def plan(study, workdir: str) -> list[Case]:
    _design(study, workdir)  # a study that cannot be calibrated fails now
    root = os.path.join(workdir, files.CALIBRATION_DIR, _slug(simulate.design_label(replicates(study), truth(study))))
    return [Case(i, f"calibration-{_slug(c)}", os.path.join(root, _slug(c)), workdir, int(study.seeds))
            for i, c in enumerate(simulate.CASES)]


def _read(run: Case) -> dict | None:
    try:
        return json.load(open(os.path.join(run.workdir, files.CALIBRATION_COUNTS)))
    except (OSError, ValueError):
        return None


def finished(study, run: Case) -> bool:
    got = _read(run)
    found = json.load(open(files.study_path(run.study_dir, files.FINDINGS_JSON)))
    return got is not None and got.get("settings") == settings(study, found)


def process_case(study, run: Case, log=print, final: bool = False) -> None:
    """The case's simulated studies, judged; the verdicts counted per scenario in <case>/counts.json."""
    found, des, linear = _design(study, run.study_dir)
    want = settings(study, found)
    counts, rows = simulate.case_counts(found, des, linear, run.index, want["seeds"], want["effect"], want["n_boot"])
    os.makedirs(run.workdir, exist_ok=True)
    with open(os.path.join(run.workdir, files.CALIBRATION_COUNTS), "w") as f:
        json.dump(dict(settings=want, case=simulate.CASES[run.index], counts=counts, rows=rows), f, indent=1)
    log(json.dumps(simulate.results_line(simulate.case_result(simulate.CASES[run.index], counts, rows))))


def join(study, runs: list[Case], workdir: str, ctx) -> dict:
    """DIR/calibration.json from the four cases' counts."""
    found, des, linear = _design(study, workdir)
    want = settings(study, found)
    got = [_read(r) for r in runs]
    missing = [r.name for r, g in zip(runs, got) if g is None or g.get("settings") != want]
    if missing:
        raise FileNotFoundError(f"the calibration's cases {', '.join(missing)} have no counts for these settings; "
                                "run without --join_only to simulate them")
    cases = [simulate.case_result(g["case"], g["counts"], g.get("rows")) for g in got]
    return simulate.write(workdir, found, des, linear, cases, want["seeds"], want["effect"], want["n_boot"],
                          replicates(study), ctx.runs_s or 0.0, truth(study))


def report(study, workdir: str, cal: dict, ctx) -> str:
    """DIR/report.md rendered again (its calibration section) and the table printed."""
    from linscale_jax.study.scaling import report as report_lib

    path = report_lib.write_report(workdir)
    ctx.log("| case | better | worse | equivalent | not_resolved | target |\n|---|---|---|---|---|---|")
    for c in cal["cases"]:
        ctx.log(f"| {c['case']} | {c['better']:.0%} | {c['worse']:.0%} | {c['equivalent']:.0%} | "
                f"{c['not_resolved']:.0%} | {c['target']} |")
    ctx.log(f"\n{cal['design']} ({cal['cost']['text']}). {cal['summary']}")
    return path
