"""Studies side by side: replicates (another seed, another machine) or two versions of the code.

    python -m linscale_jax.study side_by_side --workdir=A --workdir=B [--out=FILE.md]
    text = render([A, B])

Reads each study's findings.json, fit/fits.json, holdout.csv and fit/table.csv (what `python -m
study` writes) and prints one markdown document: the three findings' verdicts, the lowest loss at
the largest common compute with its interval, each arch minus llama there, the L(C) exponents, the
held-out predictions, final losses of every arch's largest size, and the checkpoint-to-checkpoint
noise of the laws' loss and of the raw val_loss; for two studies, finding 2 arch by arch
(study.scaling.reproduce: the second's differences against the first's intervals, their
consistency, widths, MDE, power). A last line says whether the verdicts agree.
"""

from __future__ import annotations

import csv
import json
import os

from linscale_jax import contract
from linscale_jax.study import files, inputs
from linscale_jax.study.scaling import reproduce

def _load(workdir: str) -> dict:
    need = [files.study_path(workdir, files.FINDINGS_JSON),
            files.study_path(workdir, files.STUDY_FIT, contract.FITS_JSON)]
    missing = [p for p in need if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"{workdir} is not a finished study (missing {', '.join(missing)}); run "
                                f"`python -m linscale_jax.study --config=... --workdir={workdir}` (or --join_only) first")
    hold = files.study_path(workdir, files.HOLDOUT_CSV)
    table = list(csv.DictReader(open(files.study_path(workdir, files.STUDY_FIT, files.STUDY_TABLE))))
    final = {}
    for r in table:  # the largest size's last checkpoint per arch
        key = (float(r["n_params"]), int(r["step"]))
        if r["arch"] not in final or key > final[r["arch"]][0]:
            final[r["arch"]] = (key, r)
    return dict(findings=inputs.findings(need[0]), fits=json.load(open(need[1])),
                holdout=list(csv.DictReader(open(hold))) if os.path.exists(hold) else [],
                final={a: v[1] for a, v in final.items()})


def _ci(v, d=3) -> str:
    if v is None:
        return "—"
    return f"{v[0]:.{d}f}" + ("" if v[1] is None else f" [{v[1]:.{d}f}, {v[2]:.{d}f}]")


def _verdict(v) -> str:
    """A finding's verdict: findings.json holds study.verdicts' dict ({"verdict", ...}) per finding."""
    return v.get("verdict", "—") if isinstance(v, dict) else (v or "—")


def render(workdirs: list[str]) -> str:
    studies = [_load(w) for w in workdirs]
    names = [os.path.basename(os.path.normpath(w)) or w for w in workdirs]
    head = "| | " + " | ".join(names) + " |"
    sep = "|---|" + "---|" * len(names)
    L = ["# Studies side by side", "", "Directories: " + ", ".join(f"`{w}`" for w in workdirs), "",
         "## Findings", "", head, sep]
    keys = ("power_laws", "equal_compute", "retrieval")
    for k in keys:
        L.append(f"| {k} | " + " | ".join(_verdict(s["findings"]["findings"].get(k, "—")) for s in studies) + " |")
    L += ["", "## Lowest loss at the largest common compute", "", head, sep]
    for label, key in (("envelope", "common_compute"), ("fitted L(C)", "law_at_common_compute")):
        cells = []
        for s in studies:
            c = s["findings"].get(key) or {}
            if not c.get("best"):
                cells.append("—")
                continue
            cells.append(f"{c['best']} (runner-up {c['runner_up']} +{_ci(c['diff'])}; "
                         f"{'resolved' if c.get('resolved') else 'not resolved'}; C={c['compute']:.3g})")
        L.append(f"| {label} | " + " | ".join(cells) + " |")
    archs = sorted({a for s in studies for a in s["fits"]})
    for a in archs:
        if a == contract.BASELINE_ARCH:
            continue
        cells = [_ci((s["findings"].get("common_compute") or {}).get("vs_llama", {}).get(a)) for s in studies]
        L.append(f"| {a} − {contract.BASELINE_ARCH} (envelope) | " + " | ".join(cells) + " |")
    L += ["", "## L(C) exponent [95%]", "", head, sep]
    for a in archs:
        cells = []
        for s in studies:
            e = s["fits"].get(a, {}).get("L_C")
            ci = ((e or {}).get("ci95") or {}).get("exponent")
            cells.append("—" if e is None else _ci([e["exponent"], *(ci or [None, None])], 4))
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    L += ["", "## Final loss of the largest size (laws' loss) and held-out prediction", "", head, sep]
    for a in archs:
        cells = []
        for s in studies:
            f = s["final"].get(a)
            h = next((r for r in s["holdout"] if r["arch"] == a), None)
            text = f"{float(f['loss']):.4f}" if f else "—"
            if h and h["ci_low"]:
                inside = float(h["ci_low"]) <= float(h["actual"]) <= float(h["ci_high"])
                text += (f"; predicted {float(h['predicted']):.4f} [{float(h['ci_low']):.4f}, "
                         f"{float(h['ci_high']):.4f}] {'inside' if inside else 'OUTSIDE'}")
            elif h:
                text += f"; predicted {float(h['predicted']):.4f} (no interval)"
            cells.append(text)
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    L += ["", "## Checkpoint-to-checkpoint noise (nats; rising share)", "",
          "| arch | " + " | ".join(f"{n}: laws' loss | {n}: raw val_loss" for n in names) + " |",
          "|---|" + "---|---|" * len(names)]
    for a in archs:
        cells = []
        for s in studies:
            for key in ("checkpoint_sd", "checkpoint_sd_raw"):
                v = (s["findings"].get(key) or {}).get(a)
                ok = v and v.get("sd") is not None  # None: runs too short to measure
                cells.append(f"{v['sd']:.4f} ({v['rise']:.0%})" if ok else "—")
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    if len(studies) == 2:  # finding 2 arch by arch: the second study against the first's intervals
        L += ["", *reproduce.section(studies[0]["findings"], studies[1]["findings"], tuple(names))]
    same = all(len({_verdict(s["findings"]["findings"].get(k)) for s in studies}) == 1 for k in keys)
    best = {(s["findings"].get("common_compute") or {}).get("best") for s in studies}
    resolved = [(s["findings"].get("common_compute") or {}).get("resolved") for s in studies]
    agree_best = len(best) == 1 or not any(resolved)
    L += ["", f"**Verdicts agree: {'yes' if same and agree_best else 'no'}** (findings "
          f"{'identical' if same else 'differ'}; lowest arch at the common compute "
          f"{'the same' if len(best) == 1 else 'differs, ' + ('but neither is resolved' if not any(resolved) else 'and at least one says resolved')}).",
          ""]
    return "\n".join(L)
