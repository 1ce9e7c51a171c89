"""The study's held-out check: each arch's L(N, D) fitted without its largest size predicts that size.

    summary = write(table, seed_sd, workdir, n_boot, seed)   # DIR/holdout.csv, holdout_curves.csv,
                                                            # holdout.json (the data)
    lines = report_section(workdir)                         # the report.md section, from holdout.json

fit.holdout does the work (approach 3, bounded, on the smaller sizes; the two largest sizes are held
out from 5 sizes on; the interval draws the fitted sizes with their sizes fixed and adds the
held-out run's own noise). The seed sd is the study's measured one with its degrees of freedom
(study.verdicts: replicate runs, pooled over the archs), so its uncertainty widens the interval.
"""

from __future__ import annotations

import json
import os

import numpy as np

from linscale_jax import contract

# The paper fits its laws on all sizes and reports no held-out prediction (notes §6); the nearest
# published figure is GPT-4's (OpenAI 2023): final loss predicted from runs of up to 1/10,000 the
# compute, "with high accuracy" (shown in a figure, no number given).
PAPER_NOTE = ("The paper (Shen et al. 2024) reports no extrapolation accuracy: its laws are fitted "
              "to all six sizes and not checked on a held-out one.")


def write(table, seed_sd, workdir: str, n_boot: int, seed: int) -> dict:
    """Predict every arch's held-out size(s) of `table` (C in PF-days) with `seed_sd`
    (fit.bootstrap.SeedSd); write the CSVs and holdout.json; return holdout.json's dict."""
    from linscale_jax.fit import holdout
    from linscale_jax.fit.table import FitError

    preds, errors = [], {}
    for arch in table.archs:
        try:
            preds += holdout.predict(table.select(arch), n_boot=n_boot, seed=seed, seed_sd=seed_sd)
        except FitError as e:
            errors[arch] = str(e)
    holdout.write_csv(preds, contract.study_path(workdir, contract.HOLDOUT_CSV))
    holdout.write_curves_csv(preds, contract.study_path(workdir, contract.HOLDOUT_CURVES_CSV))
    rows = [{**p.final(), "curve_inside": float(np.mean(p.inside)), "law": p.law, "resid_sd": p.resid_sd,
             "failed": p.failed, "n_sizes_fit": p.n_sizes_fit} for p in preds]
    summary = {"rows": rows, "errors": errors, "seed_sd": seed_sd.json(), "n_boot": n_boot}
    with open(contract.study_path(workdir, contract.HOLDOUT_JSON), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


def _f(x, fmt=".4f") -> str:
    return "—" if x is None else format(x, fmt)


def bound_note(law: dict) -> str:
    """' (α at its bound)' for a fit whose E, α or β sits on its box: the data do not pin it down."""
    names = {"E": "E", "alpha": "α", "beta": "β"}
    b = law.get("at_bound") or []
    return f" ({', '.join(names[k] for k in b)} at {'its bound' if len(b) == 1 else 'their bounds'})" if b else ""


def report_section(workdir: str) -> list[str]:
    path = contract.study_path(workdir, contract.HOLDOUT_JSON)
    if not os.path.exists(path):
        return []
    s = json.load(open(path))
    sd = s["seed_sd"]
    sd_text = (f"{sd['sd']:.3g} nats ({sd['source']}"
               + (f", 95% interval [{sd['ci95'][0]:.3g}, {sd['ci95'][1]:.3g}]" if sd.get("ci95") else "") + ")")
    L = ["## Held-out prediction of the largest size", "",
         "Each arch's approach-3 law L(N, D) = E + A/N^α + B/D^β (α, β bounded to [0.01, 2.5]) is fitted to "
         "every size but the largest (the two largest from 5 sizes on) and predicts the held-out size's loss "
         "at each of its checkpoints. 95% interval for the observed loss: refits on draws of the fitted "
         "sizes (sizes fixed; checkpoint residuals in blocks; seed offsets whose sd is drawn from the "
         f"measured seed sd {sd_text}), plus the held-out run's own seed offset and checkpoint noise. "
         f"{s['n_boot']} draws; more than 10% failed refits give no interval. A parameter at its bound is one "
         "the fitted sizes do not pin down. Files: holdout.csv (final checkpoint), holdout_curves.csv (every "
         "checkpoint).", "",
         "| arch | N held out | predicted final [95%] | actual | error | inside? | curve points inside | "
         "E, α, β of the fit | failed refits |", "|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        law = r["law"]
        ci = "no interval" if r["ci_low"] is None else f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]"
        inside = "**no interval**" if r["ci_low"] is None else "**yes**" if r["inside"] else "**no**"
        L.append(f"| {r['arch']} | {r['n_params']:.3g} | {r['predicted']:.4f} {ci} | {r['actual']:.4f} | "
                 f"{r['actual'] - r['predicted']:+.4f} | {inside} | {r['curve_inside']:.0%} | "
                 f"{law['E']:.3g}, {law['alpha']:.3g}, {law['beta']:.3g}{bound_note(law)} | {r['failed']:.0%} |")
    for a, e in s["errors"].items():
        L.append(f"\n**No held-out prediction for {a}**: {e}")
    n_in = sum(r["inside"] for r in s["rows"])
    L += ["", f"{n_in} of {len(s['rows'])} held-out sizes' actual final loss lies inside its interval. An "
          "actual value outside flags the law as not predictive at that size (or the held-out run as off its "
          "trend). " + PAPER_NOTE, "", "![held-out prediction](report/holdout.png)", ""]
    return L
