"""The paper's three qualitative findings, each judged on a study's own numbers with intervals.

    lines, verdicts = section(archs, fits, holdout_summary, common, law, recall_rows)

1. Power laws fit all four architectures: the L(C) exponent's 95% interval lies below 0 and the
   held-out largest size's final loss falls inside its predicted 95% interval (study.holdout).
2. Linear models match or beat LLaMA in loss at equal compute: each linear arch minus llama at the
   largest common compute by the fitted L(C) laws (compare.law_at_common_compute; the envelope of
   compare.loss_at_common_compute beside it), with the run-bootstrap + noise interval. Below 0 resolved = beats; interval across 0 = matches within the
   noise; above 0 resolved = LLaMA better (not reproduced for that arch).
3. LLaMA leads on retrieval: the MQAR recall experiment (configs/study/recall.py, read from
   study.recall_from through study.recall.verdict_input), llama minus each linear arch per (width,
   pairs) cell with a normal interval from the cells' intervals (query noise and seed spread);
   "not measured" unless LLaMA's positive control is met; cells that did not train are left out.
Whatever the outcome, the verdict is stated plainly (reproduced / not reproduced / not resolved).
"""

from __future__ import annotations

import os

import numpy as np

LINEAR = ("tnl", "hgrn2", "cosformer2")
SECTION = "## The paper's findings in miniature"


def _ci(v, digits=3) -> str:
    return f"{v[0]:+.{digits}f} [{v[1]:+.{digits}f}, {v[2]:+.{digits}f}]"


def power_laws(fits: dict, holdout: dict | None, archs) -> tuple[str, list[str]]:
    """Finding 1 for the study's `archs`. fits: fits.json; holdout: holdout.json (or None)."""
    rows, ok_all = [], True
    held = (holdout or {}).get("archs", {})
    for a in archs:
        if a not in fits:
            rows.append(f"| {a} | not fitted | — | no |")
            ok_all = False
            continue
        e = fits[a]["L_C"]
        ci = (e.get("ci95") or {}).get("exponent") or [np.nan, np.nan]
        neg = bool(np.isfinite(ci[1]) and ci[1] < 0)
        h = held.get(a)
        inside = bool(h and h.get("inside"))
        cell = (f"{h['actual']:.4f} in [{h['ci_low']:.4f}, {h['ci_high']:.4f}]: "
                f"{'inside' if inside else 'OUTSIDE'}") if h else "no held-out prediction"
        ok = neg and inside
        ok_all &= ok
        rows.append(f"| {a} | {e['exponent']:.4f} [{ci[0]:.4f}, {ci[1]:.4f}] | {cell} | "
                    f"{'yes' if ok else 'no'} |")
    verdict = "**reproduced**" if ok_all else "**not reproduced for every arch**"
    return verdict, ["| arch | L(C) exponent [95%] | held-out final loss in its 95% interval? | "
                     "power law holds |", "|---|---|---|---|", *rows]


def _pairwise(result: dict) -> dict:
    return {a: v for a, v in (result.get("vs_llama") or {}).items() if a in LINEAR}


def _judge(d) -> str:
    if not np.isfinite(d[1]) or not np.isfinite(d[2]):
        return "no interval"
    if d[2] < 0:
        return "beats LLaMA (resolved)"
    if d[1] > 0:
        return "LLaMA lower (resolved)"
    return "matches LLaMA (difference not resolved)"


def equal_compute(common: dict, law: dict) -> tuple[str, list[str]]:
    """Finding 2 from the fitted laws (`law`; the paper compares its fitted L(C) curves) at the
    largest common compute, with the envelope (`common`: measured points, wider intervals) beside.
    Without a fitted law for an arch, its envelope value decides."""
    env, fitted = _pairwise(common), _pairwise(law)
    rows, worse, better = [], [], []
    for a in LINEAR:
        e, f = env.get(a), fitted.get(a)
        if e is None and f is None:
            continue
        decide = f if f is not None else e
        if _judge(decide).startswith("LLaMA lower"):
            worse.append(a)
        elif _judge(decide).startswith("beats"):
            better.append(a)
        rows.append(f"| {a} | {_ci(f) + ' — ' + _judge(f) if f is not None else 'law not fitted'} | "
                    f"{_ci(e) + ' — ' + _judge(e) if e is not None else '—'} |")
    if not rows:
        return "**not measured** (no llama or no linear arch in this study)", []
    if worse:
        verdict = (f"**not reproduced** for {', '.join(worse)} (LLaMA's loss is lower, resolved)"
                   + (f"; reproduced for the others" if len(worse) < len(rows) else ""))
    else:
        verdict = ("**reproduced**: no linear arch is resolved worse than LLaMA"
                   + (f" ({', '.join(better)} resolved better)" if better else ""))
    return verdict, [f"At C = {common['compute']:.3g} PF-days (the largest compute every arch reaches "
                     "with >= 2 runs); arch minus llama in nats [95%: runs resampled + checkpoint and "
                     "seed noise]; the verdict uses the fitted laws (the envelope's interval also "
                     "moves with which runs a resample keeps, so it is wider).", "",
                     "| arch | fitted L(C): arch − llama | envelope: arch − llama |",
                     "|---|---|---|", *rows]


def recall_differences(rows: list[dict]) -> list[tuple]:
    """(d_model, n_pairs, arch, [llama − arch, lo, hi]) per cell of trained rows (study.recall's
    seed "all" rows): normal interval from each row's 95% interval, which holds the seed spread."""
    out = []
    for d, p in sorted({(r["d_model"], r["n_pairs"]) for r in rows}):
        at = {r["arch"]: r for r in rows if (r["d_model"], r["n_pairs"]) == (d, p)}
        if "llama" not in at:
            continue
        ll = at["llama"]
        for a in LINEAR:
            if a not in at:
                continue
            x = at[a]
            se = np.hypot(ll["ci_high"] - ll["ci_low"], x["ci_high"] - x["ci_low"]) / (2 * 1.96)
            diff = ll["accuracy"] - x["accuracy"]
            out.append((d, p, a, [diff, diff - 1.96 * se, diff + 1.96 * se]))
    return out


def retrieval(recall: dict | None, source: str) -> tuple[str, list[str]]:
    """Finding 3 from study.recall.verdict_input (None: not run). Without the positive control
    (LLaMA >= 0.9 in some cell) it is not measured; cells that did not train are left out."""
    from study.recall import control_sentence

    if not recall:
        return ("**not measured here**: run `python -m study --config=configs/study/recall.py "
                "--workdir=R` and pass `--config.recall_from=R`", [])
    skipped = ([f"Did not train (left out): {', '.join(f'{a} d{d} e{e} P={p}' for a, d, e, p in recall['did_not_train'])}."]
               if recall["did_not_train"] else [])
    if not recall["control"]["met"]:
        return f"**not measured** ({control_sentence(recall['control'])})", skipped
    diffs = recall_differences(recall["rows"])
    lead = sum(v[1] > 0 for *_, v in diffs)
    behind = sum(v[2] < 0 for *_, v in diffs)
    verdict = ("**reproduced**" if diffs and lead == len(diffs) else
               "**not reproduced**" if behind > lead else "**partly reproduced**")
    verdict += (f": LLaMA's MQAR accuracy is higher, resolved, in {lead} of {len(diffs)} "
                f"(width, pairs, linear arch) cells; lower, resolved, in {behind}")
    return verdict, [f"From {source} (MQAR; llama minus arch, seed-mean accuracy [95%]):", "",
                     "| d | pairs | arch | llama − arch |", "|---|---|---|---|",
                     *(f"| {d} | {p} | {a} | {_ci(v)} |" for d, p, a, v in diffs), "", *skipped]


def section(archs, fits: dict, holdout: dict | None, common: dict | None, law: dict | None,
            recall_rows: dict | None, recall_source: str = "") -> tuple[list[str], dict]:
    """The report's findings section for the study's `archs` (one verdict per finding, then its
    table), and {finding: verdict} (report.py writes it to DIR/findings.json)."""
    L = [SECTION, "", "Each of the paper's qualitative findings, judged on this study's numbers "
         "(verdicts follow the intervals, not the paper):", ""]
    v1, t1 = power_laws(fits, holdout, archs)
    v2, t2 = equal_compute(common, law or {}) if common else ("**not measured** (one arch)", [])
    v3, t3 = retrieval(recall_rows, recall_source)
    verdicts = {}
    for key, title, v, t in (
            ("power_laws", "1. Power laws fit all four architectures", v1, t1),
            ("equal_compute", "2. Linear models match or beat LLaMA in loss at equal compute", v2, t2),
            ("retrieval", "3. LLaMA leads on retrieval", v3, t3)):
        L += [f"**{title}:** {v}.", ""] + (t + [""] if t else [])
        verdicts[key] = v.replace("**", "")
    return L, verdicts


def recall_rows_from(study) -> tuple[dict | None, str]:
    """study.recall.verdict_input of the recall study named by study.recall_from (its workdir),
    or (None, '')."""
    src = str(study.get("recall_from", "") or "")
    if not src:
        return None, ""
    path = os.path.join(src, "recall.csv")
    if not os.path.exists(path):
        raise FileNotFoundError(f"study.recall_from={src!r} has no recall.csv; run "
                                f"`python -m study --config=configs/study/recall.py --workdir={src}` first")
    from study.recall import verdict_input

    return verdict_input(path), path
