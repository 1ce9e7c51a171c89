"""Each arch label's MQAR recall against the baseline (contract.BASELINE_ARCH, the positive control)
at equal steps, with the four outcomes of the loss verdicts (study.scaling.verdicts.outcome).

    out = equal_steps(verdict_input(R + "/recall.csv"))   # {label: row}
    lines = equal_steps_lines(out)                         # the report's table

Per cell (d_model, n_pairs) where the positive control passed, a label's seed-mean accuracy minus
the baseline's, with a normal interval from the two cells' intervals (each spans its seeds' 95 %
Wilson intervals, so it holds the query noise and the seed spread; se = the two half-widths in
quadrature / 1.96):
  equivalent    the 90 % interval lies inside ±MARGIN (accuracy);
  better/worse  the 95 % interval lies above / below 0;
  not_resolved  otherwise.
Only cells the label was allowed at least the control's steps count (max_steps: equal steps; a run
that stopped sooner reached the early stop's accuracy). A copy-level cell counts: its model trained
(its loss is below the values' marginal) and its accuracy is measured at equal steps; a cell that
did not train gives "not measured". Without the positive control every label is "not measured".
A label judged in several cells takes their common outcome, or "depends on the cell".
"""

from __future__ import annotations

import numpy as np

from linscale_jax.contract import BASELINE_ARCH

MARGIN = 0.05  # accuracy: an equivalence margin of 5 points
Z95, Z90 = 1.959964, 1.644854
NOT_MEASURED = "not measured"


def _se(a: dict, b: dict) -> float:
    return float(np.hypot(a["ci_high"] - a["ci_low"], b["ci_high"] - b["ci_low"]) / (2 * Z95))


def outcome(diff: float, se: float, margin: float = MARGIN) -> str:
    """better / worse / equivalent / not_resolved of a difference (label − baseline) and its se."""
    if -margin < diff - Z90 * se and diff + Z90 * se < margin:
        return "equivalent"
    if diff - Z95 * se > 0:
        return "better"
    if diff + Z95 * se < 0:
        return "worse"
    return "not_resolved"


def equal_steps(recall: dict | None, margin: float = MARGIN, labels=()) -> dict:
    """{label: {verdict, cells: [{d_model, head_dim, n_pairs, status, accuracy, diff, ci_low,
    ci_high, verdict}], reason}} for every label but the baseline in recall.csv (verdict_input's
    dict, with its `cells`), and "not measured" for each of `labels` (a study's archs) it lacks;
    {} without a recall study."""
    cells = (recall or {}).get("cells", [])
    if not cells:
        return {}
    passed = set(map(tuple, recall["control"]["passed"])) if recall["control"]["met"] else set()
    base = {(r["d_model"], r["n_pairs"]): r for r in cells if r["arch"] == BASELINE_ARCH}
    out = {}
    for label in dict.fromkeys(r["arch"] for r in cells if r["arch"] != BASELINE_ARCH):
        mine, why = [], []
        for r in (r for r in cells if r["arch"] == label):
            key = (r["d_model"], r["n_pairs"])
            if key not in passed:
                why.append("the positive control did not pass")
            elif r["max_steps"] < base[key]["steps"]:
                why.append("fewer steps than the control")
            elif r["status"] == "did_not_train":
                why.append("did not train")
            else:
                b = base[key]
                diff, se = r["accuracy"] - b["accuracy"], _se(r, b)
                mine.append(dict(d_model=r["d_model"], head_dim=r["head_dim"], n_pairs=r["n_pairs"],
                                 status=r["status"], accuracy=r["accuracy"], control=b["accuracy"],
                                 steps=r["steps"], control_steps=b["steps"], diff=diff,
                                 ci_low=diff - Z95 * se, ci_high=diff + Z95 * se,
                                 verdict=outcome(diff, se, margin)))
        if mine:
            out[label] = dict(verdict=_one_verdict(c["verdict"] for c in mine),
                              cells=mine, diff=mine[0]["diff"], ci_low=mine[0]["ci_low"],
                              ci_high=mine[0]["ci_high"])
        else:
            out[label] = dict(verdict=NOT_MEASURED, cells=[], reason="; ".join(dict.fromkeys(why)) or
                              "no cell", diff=None, ci_low=None, ci_high=None)
    for label in labels:
        if label != BASELINE_ARCH and label not in out:
            out[label] = dict(verdict=NOT_MEASURED, cells=[], reason="not in the recall study", diff=None,
                              ci_low=None, ci_high=None)
    return out


def equal_steps_lines(out: dict, margin: float = MARGIN) -> list[str]:
    """The table of equal_steps' rows: label − baseline seed-mean accuracy [95 %] per cell."""
    if not out:
        return []
    b = BASELINE_ARCH
    lines = [f"Each label against {b} at equal steps (seed-mean MQAR accuracy, label − {b} [95%]; "
             f"equivalent: the 90% interval inside ±{margin:g}):", "",
             f"| label | d | head dim | pairs | accuracy ({b}) | steps ({b}) | label − {b} [95%] | status | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, row in out.items():
        if not row["cells"]:
            lines.append(f"| {label} | | | | | | | | {NOT_MEASURED} ({row['reason']}) |")
        for c in row["cells"]:
            lines.append(f"| {label} | {c['d_model']} | {c['head_dim']} | {c['n_pairs']} | {c['accuracy']:.3f} "
                         f"({c['control']:.3f}) | {c['steps']} ({c['control_steps']}) | {c['diff']:+.3f} "
                         f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] | {c['status'].replace('_', ' ')} | "
                         f"**{c['verdict']}** |")
    return lines + [""]


def summary_text(out: dict) -> str:
    """'tnl −0.700 [−0.73, −0.67] (worse); gdn ...' for the report's summary line."""
    return "; ".join(f"{a} " + (f"{r['diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}] ({r['verdict']})"
                                if r["diff"] is not None else f"({r['verdict']}: {r['reason']})")
                     for a, r in out.items())


def _one_verdict(verdicts) -> str:
    """The cells' common verdict, else 'depends on the cell'."""
    vals = set(verdicts)
    return vals.pop() if len(vals) == 1 else "depends on the cell"
