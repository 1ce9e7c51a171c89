"""The report's "State size as an axis": the loss and the MQAR accuracy against the decoding state in
floats per layer, beside N and C, per family of labels sharing a mixer, from findings.json's
`state_axis` (study.scaling.state_axis: the fits, their intervals and verdicts; this module renders).

    lines = section(doc)       # [] for a findings.json written before the axis existed (or no final loss)
    lines = summary_line(doc)  # the summary's one line (report.summary.ITEMS)
    plot(axis, path)           # report/state.png: a panel per fitted family (and recall family)

Loss panels: each run's final loss moved to the family's median compute along the fitted compute
slope (loss − b·(ln C − median ln C)), against its state floats per layer (log2 axis), with the fitted
line s·log2 S; a label's colour is its arch's (linscale_jax.palette), its seed-0 runs joined in size
order (the arch solid, a variant dashed), one marker per size, replicates hollow. MQAR panels: each seed-mean cell's accuracy and its 95% interval against the usable
state floats per layer, with the fitted line.
"""

from __future__ import annotations

import math
import os

import numpy as np

from linscale_jax import palette
from linscale_jax.study import files
from linscale_jax.study.scaling.state_axis import NEEDS_TWO

TITLE = "## State size as an axis"
PNG = "state.png"
WORDS = {"better": "more state lowers the loss", "worse": "more state raises the loss",
         "equivalent": "equivalent", "not_resolved": "not resolved"}
RECALL_WORDS = {"raises": "more state raises recall", "lowers": "more state lowers recall",
                "not_resolved": "not resolved"}


def _iv(v: float, lo: float, hi: float, d: int = 3) -> str:
    return f"{v:+.{d}f} [{lo:+.{d}f}, {hi:+.{d}f}]"


def _loss_cell(e: dict) -> str:
    if e.get("status") != "fitted":
        return f"not resolved ({e.get('reason', '')})"
    return f"{_iv(e['per_doubling'], e['ci_low'], e['ci_high'])} ({WORDS[e['verdict']]})"


def _range(values) -> str:
    values = list(values)
    lo, hi = min(values), max(values)
    return f"{lo:,.0f}" if lo == hi else f"{lo:,.0f}–{hi:,.0f}"


def section(doc) -> list[str]:
    axis = doc.found.get("state_axis")
    if not axis or not (axis["loss"] or axis.get("recall_source")):
        return []  # written before the axis existed, or no run with a final loss
    fitted = [f for f in axis["loss"] if f["status"] != NEEDS_TWO]
    single = [f["family"] for f in axis["loss"] if f["status"] == NEEDS_TWO]
    L = [TITLE, ""]
    if not fitted:
        L += [f"Loss against state floats per layer: **{NEEDS_TWO}** in every family ({', '.join(single)}: one "
              "state per size). Add a label that resizes a mixer's state at the same sizes, e.g. `tnl+n_heads=4` "
              "or `gdn+expand_v=1` (study.scaling.state_axis.STATE_FIELDS), and rerun the study: its finished runs "
              "are reused.", ""]
    else:
        margin = axis.get("margin")
        L += ["Each run's final validation loss per family of labels sharing a mixer (the labels less their "
              f"state-resizing changes: {', '.join(axis['state_fields'])}), fitted as loss = a + b·ln C + s·log2 S "
              "(and with ln N in place of ln C): s is the change in loss, in nats, per doubling of the state floats "
              "per layer S at equal compute (at equal parameters), 95% interval from the residuals. Every run ends "
              "at the same token budget, so each gives a point with its own C, N and S; the laws' prediction at C* "
              "would give one point per label, and a label has no single state there. Verdicts as the findings' "
              + (f"(equivalent: the 90% interval inside ±{margin:g} nats)." if margin is not None else "."), "",
              "| family | labels | runs | state floats per layer | nats per doubling of S at equal C [95%] | "
              "at equal N [95%] |", "|---|---|---|---|---|---|"]
        for f in fitted:
            L.append(f"| {f['family']} | {', '.join(f['labels'])} | {f['runs']} | "
                     f"{_range(p['state_floats'] for p in f['points'])} | {_loss_cell(f['compute'])} | "
                     f"{_loss_cell(f['params'])} |")
        L.append("")
        if single:
            L += [f"Not fitted, **{NEEDS_TWO}** (one state per size): {', '.join(single)}.", ""]
    L += _recall_lines(axis)
    if os.path.exists(files.study_path(doc.workdir, files.REPORT_DIR, PNG)):
        L += [f"![state size](report/{PNG})", ""]
    return L


def _recall_lines(axis: dict) -> list[str]:
    if not axis.get("recall_source"):
        return ["MQAR accuracy against the state: not measured here (pass `--config.recall_from=R`, a recall "
                "study's workdir: its recall.csv carries each cell's usable state floats).", ""]
    rec = axis["recall"]
    fitted = [r for r in rec if r["status"] != NEEDS_TWO]
    single = sorted({r["family"] for r in rec if r["status"] == NEEDS_TWO} - {r["family"] for r in fitted})
    L = [f"MQAR ({axis['recall_source']}): each seed-mean cell that trained, per family and number of key-value "
         "pairs, accuracy = a + s·log2 U (+ n·log2 N where N varies apart from the state), U the usable state "
         "floats per layer; weighted by each cell's 95% interval (the residuals' when wider).", ""]
    if fitted:
        L += ["| family | pairs | labels | usable state floats per layer | accuracy per doubling of U [95%] | "
              "beside |", "|---|---|---|---|---|---|"]
        for r in fitted:
            cell = (f"{_iv(r['per_doubling'], r['ci_low'], r['ci_high'])} ({RECALL_WORDS[r['verdict']]})"
                    if r["status"] == "fitted" else f"not resolved ({r.get('reason', '')})")
            L.append(f"| {r['family']} | {r['n_pairs']} | {', '.join(r['labels'])} | "
                     f"{_range(p['usable_state_floats'] for p in r['points'])} | {cell} | "
                     f"{'N' if r.get('beside') else 'the state alone (N moves with it or is fixed)'} |")
        L.append("")
    if single:
        L += [f"MQAR not fitted, **{NEEDS_TWO}**: {', '.join(single)}.", ""]
    return L


def summary_line(doc) -> list[str]:
    """'- State size: loss per doubling of the state at equal compute, nats [95%]: gdn ... (verdict)'."""
    axis = doc.found.get("state_axis")
    if not axis:
        return []
    fitted = [f for f in axis["loss"] if f.get("compute", {}).get("status") == "fitted"]
    if not fitted:
        return []
    parts = [f"{f['family']} {_iv(f['compute']['per_doubling'], f['compute']['ci_low'], f['compute']['ci_high'])} "
             f"({WORDS[f['compute']['verdict']]})" for f in fitted]
    return [f"- State size: loss per doubling of the state floats per layer at equal compute, nats [95%]: "
            f"{'; '.join(parts)} (section 'State size as an axis')."]


def _panels(axis: dict) -> list[tuple[str, dict]]:
    return ([("loss", f) for f in axis["loss"] if f.get("compute", {}).get("status") == "fitted"]
            + [("recall", r) for r in axis.get("recall", []) if r["status"] == "fitted"])


def plot(axis: dict, path: str) -> str | None:
    """report/state.png (module docstring); None when nothing is fitted."""
    panels = _panels(axis)
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.6), squeeze=False)
    markers = "osD^v<>"
    for ax, (kind, f) in zip(axes[0], panels):
        if kind == "loss":
            e, pts = f["compute"], f["points"]
            lnc = np.log([p["pf_days"] for p in pts])
            mid = float(np.median(lnc))
            sizes = list(dict.fromkeys(p["size"] for p in pts))
            for label in f["labels"]:
                mine = [(p, c) for p, c in zip(pts, lnc) if p["label"] == label]
                for p, c in mine:
                    ax.scatter(p["state_floats"], p["loss"] - e["slope_log_x"] * (c - mid), color=palette.color(label),
                               marker=markers[sizes.index(p["size"]) % len(markers)], s=22,
                               facecolors="none" if p["seed"] else palette.color(label))
                line = sorted((p["state_floats"], p["loss"] - e["slope_log_x"] * (c - mid)) for p, c in mine
                              if not p["seed"])
                ax.plot(*zip(*line), color=palette.color(label), ls=palette.linestyle(label), lw=1, label=label)
            xs = np.array(sorted(p["state_floats"] for p in pts), float)
            adj = [p["loss"] - e["slope_log_x"] * (c - mid) for p, c in zip(pts, lnc)]
            icept = float(np.mean(adj) - e["per_doubling"] * np.mean(np.log2([p["state_floats"] for p in pts])))
            ax.plot(xs, icept + e["per_doubling"] * np.log2(xs), color="k", lw=0.9, ls=":",
                    label=f"{e['per_doubling']:+.3f} nats / doubling")
            ax.set_ylabel(f"final loss at C = {math.exp(mid):.2g} PF-days (adjusted)", fontsize=8)
            ax.set_title(f"{f['family']}: loss at equal compute\n(markers: {', '.join(sizes)}; hollow: replicate)",
                         fontsize=8)
            ax.set_xlabel("state floats per layer")
        else:
            pts = f["points"]
            for label in f["labels"]:
                mine = [p for p in pts if p["label"] == label]
                y = np.array([p["accuracy"] for p in mine])
                ax.errorbar([p["usable_state_floats"] for p in mine], y,
                            yerr=[y - [p["ci_low"] for p in mine], [p["ci_high"] for p in mine] - y], fmt="o", ms=4,
                            capsize=2, color=palette.color(label), ls="none", label=label)
            us = np.array(sorted(max(p["usable_state_floats"], 1) for p in pts), float)
            ys = np.array([p["accuracy"] for p in pts])
            icept = float(np.mean(ys) - f["per_doubling"] * np.mean(np.log2([max(p["usable_state_floats"], 1)
                                                                              for p in pts])))
            ax.plot(us, icept + f["per_doubling"] * np.log2(us), color="k", lw=0.9, ls=":",
                    label=f"{f['per_doubling']:+.3f} / doubling")
            ax.set_ylim(-0.02, 1.02)
            ax.set_ylabel("MQAR accuracy (seed mean, 95%)", fontsize=8)
            ax.set_title(f"{f['family']}: MQAR, {f['n_pairs']} pairs", fontsize=8)
            ax.set_xlabel("usable state floats per layer")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw(doc) -> None:
    """The section's figure, when some family is fitted (report.draw)."""
    axis = doc.found.get("state_axis")
    if axis:
        plot(axis, files.study_path(doc.workdir, files.REPORT_DIR, PNG))
