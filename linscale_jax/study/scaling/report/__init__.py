"""DIR/report.md of a study, rendered from the study's data files; it computes nothing.

    path = write_report(workdir)      # report.md + report/*.png

Renders DIR/findings.json (study.results: verdicts, seed sds, comparisons, bracketing, optimum,
runs, wall time), DIR/fit/fits.json (+ its PNGs), DIR/holdout.json (study.holdout) and, when
`python -m linscale_jax.study --config=calibrate` has run, DIR/calibration.json. The plots draw
DIR/table.csv, DIR/fit/table.csv, DIR/fit/table_cooldown.csv, DIR/fit/envelope.csv,
DIR/holdout_curves.csv and the fitted laws, each arch in its colour (linscale_jax.palette).
Rerendering (e.g. after the calibration) gives the same numbers.

The report is SECTIONS in order, each a function Doc -> markdown lines; the first screen is the
summary (report.summary). A new section is one such function added to SECTIONS.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from linscale_jax import contract
from linscale_jax.study import files, inputs
from linscale_jax.study.scaling import findings, holdout
from linscale_jax.study.scaling import laws as scaling_laws
from linscale_jax.study.scaling.report import comparisons, figures, laws, memory, state, summary


@dataclasses.dataclass(frozen=True)
class Doc:
    """What every section reads: the study's files, loaded once."""

    workdir: str
    found: dict  # DIR/findings.json
    fits: dict  # DIR/fit/fits.json ({} when no arch was fitted)
    calibration: dict | None  # DIR/calibration.json, when calibrated


def _read(path: str):
    return json.load(open(path)) if os.path.exists(path) else None


def header(doc) -> list[str]:
    d, found = doc.found["design"], doc.found
    return [f"# Miniature scaling study ({d['runs']} runs: {','.join(d['archs'])} × {','.join(d['sizes'])})", "",
            f"Fit: approach {d['approach']}, C in PF-days (Table-1 accounting), 95% intervals of the fitted laws "
            f"from {d['bootstrap']} bootstrap resamples of whole runs"
            f"{' (clamped envelope points kept)' if d['include_clamped'] else ''}; the verdicts' and comparisons' "
            f"intervals from {found['n_boot']} paired draws with the sizes fixed (section 'The paper's findings'). "
            f"Laws, envelopes and comparisons use the checkpoints from step {d['fit_min_step']} on (the end of the "
            "learning-rate warmup); table.csv keeps every checkpoint.", ""]


def tokens_line(d: dict) -> str:
    """The budget per run beside the paper's: one budget, or each size's (study.tokens_by_size)."""
    by = d.get("tokens_by_size")
    if not by:
        return f"- Tokens per run: {d['tokens']:.3g} here vs 3e11 in the paper ({3e11 / d['tokens']:.2g}x fewer); "
    lo, hi = min(by.values()), max(by.values())
    each = ", ".join(f"{s} {t:.3g}" for s, t in by.items())
    return (f"- Tokens per run, per size ({each}): {lo:.3g} .. {hi:.3g} here vs 3e11 in the paper "
            f"({3e11 / hi:.2g}x .. {3e11 / lo:.2g}x fewer); ")


def scale(doc) -> list[str]:
    from linscale_jax.models.sizes import PAPER_CONTEXT, PAPER_VOCAB

    d, runs = doc.found["design"], doc.found["runs"]
    ns = [r["n_params"] for r in runs]
    pf = [r["pf_days"] for r in runs]
    return [
        "## Scale difference from the paper",
        f"- Parameters (non-embedding): {min(ns):.3g} .. {max(ns):.3g} "
        f"({np.log10(max(ns) / min(ns)):.2f} decades) here vs 7e7 .. 7e9 in the paper (~1e3-1e4x smaller).",
        tokens_line(d) +
        f"compute per run {min(pf):.3g} .. {max(pf):.3g} PF-days vs ~0.2 .. 200 PF-days.",
        f"- Data: `{d['data_task']}` (vocabulary `{d['vocab']}`, {d['vocab_size']} ids) vs the paper's private "
        f"2T-token English/Chinese corpus with cl100k_base ({PAPER_VOCAB} ids); losses are per token of "
        "different vocabularies and are not comparable in absolute value.",
        f"- Context {d['seq_len']} tokens, batch {d['batch']} sequences, {d['steps']} steps vs {PAPER_CONTEXT} "
        "tokens, 480 sequences, 76k steps.",
        f"- Optimiser: AdamW, peak lr {d['lr']}, β2 {d['b2']}, `{d['schedule']}` schedule after {d['warmup']} warmup "
        "steps" + (f", per arch and size from the learning-rate rule `optim.rule={d['protocol']}` "
                   "(linscale_jax.train.rule)" if d.get("protocol") not in (None, "paper")
                   else ", the same for every size") + ", vs the paper's lr 3e-4 with one fixed schedule."
        + (" A constant rate keeps every checkpoint on an equal footing for the envelope (a decaying schedule "
           "flatters the ends of short runs against the middles of long ones)." if d["schedule"] == "constant"
           else ""),
        "- Consequently the fitted coefficients describe this miniature regime only; compare exponents' "
        "signs and orderings, not values, with Table 3.", ""]


def curves(doc) -> list[str]:
    return ["## Loss vs compute", "", "![loss vs compute](report/loss_vs_compute.png)", "",
            "Per-arch panels from fit/: ![curves](fit/curves.png)", "",
            "Every run's validation loss per checkpoint, one panel per size (crosses: the cooled-down "
            "branches): ![loss vs step](report/loss_vs_step.png)", ""]


def runs_table(doc) -> list[str]:
    def f(x):
        return "—" if x is None else f"{x:.4g}"

    L = ["## Runs", "", "| run | N (non-emb) | N paper (Table 1) | N with embedding + head | steps | tokens | "
         "C (PF-days) | final val_loss | line probe acc | NIAH weighted acc |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc.found["runs"]:
        L.append(f"| {r['name']} | {r['n_params']:.3g} | {f(r.get('paper'))} | {f(r.get('total'))} | {r['steps']} | "
                 f"{r['tokens']:.3g} | {r['pf_days']:.3g} | {f(r['val_loss'])} | {f(r['probe_acc'])} | "
                 f"{f(r['niah_weighted_acc'])} |")
    return L + [""]


def wall_time(doc) -> list[str]:
    """Where the time went: per-run sums of compile, train and eval (process seconds, all
    invocations), and the last invocation's wall time of the runs phase and of the fits."""
    runs, wall = doc.found["runs"], doc.found.get("wall")
    keys = ("train_s", "train_compile_s", "eval_s", "eval_compile_s", "cooldown_s", "cooldown_compile_s")
    tot = {k: sum(r["timing"][k] for r in runs) for k in keys}
    L = ["## Wall time", ""]
    if wall is not None and wall.get("runs_s") is not None:
        L += [f"This invocation: runs phase {wall['runs_s'] / 60:.1f} min on {wall['workers']} "
              f"worker process(es), join + fits + results {wall['fit_s'] / 60:.1f} min (before this "
              "report was written).", ""]
    busy = tot["train_s"] + tot["eval_s"] + tot["cooldown_s"]
    if busy > 0:
        L += ["Summed over the runs (seconds of one worker each, every invocation; compile = XLA "
              "compilation or persistent-cache reads):", "",
              "| phase | total | compile | compile share |", "|---|---|---|---|"]
        for label, a, c in (("train", "train_s", "train_compile_s"), ("eval", "eval_s", "eval_compile_s"),
                            ("cooldowns (train + eval)", "cooldown_s", "cooldown_compile_s")):
            L.append(f"| {label} | {tot[a] / 60:.1f} min | {tot[c] / 60:.1f} min | "
                     f"{tot[c] / max(tot[a], 1e-9):.0%} |")
        comp = tot["train_compile_s"] + tot["eval_compile_s"] + tot["cooldown_compile_s"]
        L.append(f"| all runs | {busy / 60:.1f} min | {comp / 60:.1f} min | {comp / busy:.0%} |")
    return L + [""]


def held_out(doc) -> list[str]:
    return holdout.report_section(doc.workdir)


def paper_findings(doc) -> list[str]:
    return findings.section(doc.found)[0]


SECTIONS = (header, summary.section, scale, curves, laws.allocation, laws.table3, laws.noise,
            scaling_laws.report_section, held_out,
            paper_findings, comparisons.common_compute, comparisons.calibration, comparisons.niah_heatmaps,
            memory.section, state.section, runs_table, wall_time)


def draw(doc) -> None:
    """The report's own figures (report/*.png) from the study's files."""
    from linscale_jax.fit import holdout as fit_holdout
    from linscale_jax.fit.table import load

    wd = doc.workdir
    rep_dir = files.study_path(wd, files.REPORT_DIR)
    os.makedirs(rep_dir, exist_ok=True)
    fit_dir = files.study_path(wd, files.STUDY_FIT)
    table = load(os.path.join(fit_dir, files.STUDY_TABLE)).with_compute_unit("pf-days")
    figures.loss_vs_compute(table, os.path.join(fit_dir, files.ENVELOPE_CSV), doc.fits,
                            os.path.join(rep_dir, "loss_vs_compute.png"))
    every = files.study_path(wd, files.STUDY_TABLE)
    figures.loss_vs_step(every if os.path.exists(every) else os.path.join(fit_dir, files.STUDY_TABLE),
                         doc.found["runs"], os.path.join(rep_dir, "loss_vs_step.png"),
                         os.path.join(fit_dir, files.fit_table_name("cooldown", False)),
                         warmup=int(doc.found["design"]["fit_min_step"]))
    curves_csv = files.study_path(wd, files.HOLDOUT_CURVES_CSV)
    if os.path.exists(curves_csv) and os.path.getsize(curves_csv) > 80:
        fit_holdout.plot(curves_csv, table, os.path.join(rep_dir, "holdout.png"), "C (PF-days)")
    state.draw(doc)


def write_report(workdir: str, sections=SECTIONS) -> str:
    """DIR/report.md and its plots from the study's data files (module docstring)."""
    path = files.study_path(workdir, files.FINDINGS_JSON)
    found = inputs.findings(path) if os.path.exists(path) else None
    if found is None:
        raise FileNotFoundError(f"{workdir} has no {files.FINDINGS_JSON}; run `python -m linscale_jax.study "
                                f"--config=... --workdir={workdir} --join_only` first")
    doc = Doc(workdir=workdir, found=found,
              fits=_read(files.study_path(workdir, files.STUDY_FIT, contract.FITS_JSON)) or {},
              calibration=inputs.calibration(files.study_path(workdir, files.CALIBRATION_JSON)))
    draw(doc)
    lines = [line for section in sections for line in section(doc)]
    path = files.study_path(workdir, files.REPORT_MD)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
