"""The report's section on the paper's three findings, rendered from study.verdicts' JSON.

    lines, verdicts = section(result)      # result = study.verdicts.judge_all(...)

1. Power laws fit every architecture (study.verdicts.power_laws: the L(C) exponent's interval below
   0 and the largest size predicted within a stated tolerance by the law fitted without it).
2. Linear models match or beat the baseline (contract.BASELINE_ARCH) in loss at equal compute: each
   linear arch (registry.linear_archs) minus the baseline at the largest common compute, by the
   fitted L(C) laws: better / worse / equivalent (TOST, ±margin) / not_resolved.
3. The baseline leads on retrieval: the MQAR recall experiment (configs/study/recall.py, read from
   study.recall_from via study.recall.verdict_input), baseline minus each linear arch per (width,
   pairs) cell with a normal interval from the cells' intervals (query noise and seed spread);
   "not measured" unless the baseline's positive control (>= 0.9 in some cell) is met; cells that
   did not train are left out.
Every finding is judged under each loss estimator the study computed; where they disagree the
verdict is "depends on the estimator", with each estimator's values shown.
"""

from __future__ import annotations

import os

import numpy as np

from linscale_jax.contract import BASELINE_ARCH, RECALL_CSV

SECTION = "## The paper's findings in miniature"


def _ci(v, digits=3) -> str:
    return f"{v[0]:+.{digits}f} [{v[1]:+.{digits}f}, {v[2]:+.{digits}f}]"


def linear_archs() -> tuple[str, ...]:
    from linscale_jax.models import registry

    return registry.linear_archs()


def _cell(e: dict) -> str:
    if e.get("diff") is None:
        return e.get("verdict", "—")
    ci = "no interval" if e.get("ci_low") is None else f"[{e['ci_low']:+.3f}, {e['ci_high']:+.3f}]"
    return f"{e['diff']:+.3f} {ci}: {e['verdict']}"


def power_laws(f: dict, est: list[str], by: dict) -> list[str]:
    """Finding 1's table: per arch and estimator, exponent [95%], held-out error [95%], verdict."""
    L = ["| arch | estimator | L(C) exponent [95%] | held-out largest: actual − predicted [95%] | verdict |",
         "|---|---|---|---|---|"]
    for a in f["archs"]:
        for n in est:
            r = by[n]["power_laws"]["archs"].get(a, {})
            x = r.get("exponent")
            ci = r.get("exponent_ci")
            ex = "—" if x is None else f"{x:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")
            h = r.get("holdout")
            ho = (f"{h['diff']:+.3f} [{h['ci_low']:+.3f}, {h['ci_high']:+.3f}]" if h else r.get("note", "—"))
            L.append(f"| {a} | {n} | {ex} | {ho} | {r.get('verdict', '—')} |")
    return L


def equal_compute(f: dict, est: list[str], by: dict) -> list[str]:
    L = [f"At C = {f.get('compute', float('nan')):.3g} PF-days (the largest compute every arch reaches with "
         f">= 2 sizes); arch − {BASELINE_ARCH} of the fitted L(C) laws in nats [95%: sizes, checkpoint "
         "residuals and seed offsets resampled].", "",
         "| arch | " + " | ".join(est) + " | verdict |", "|---|" + "---|" * (len(est) + 1)]
    for a, r in f["archs"].items():
        L.append(f"| {a} | " + " | ".join(_cell(by[n]["equal_compute"]["archs"].get(a, {})) for n in est)
                 + f" | **{r['verdict']}** |")
    return L


def read_recall(path: str) -> dict:
    """study.recall.verdict_input of DIR/recall.csv: the trained cells' seed-mean rows, the
    positive control and the cells that did not train."""
    from study.recall import verdict_input

    return verdict_input(path)


def recall_differences(rows: list[dict]) -> list[tuple]:
    """(d_model, n_pairs, arch, [baseline − arch, lo, hi]) per cell of trained seed-mean rows: normal
    interval from each row's 95% interval, which holds the seed spread."""
    out = []
    for d, p in sorted({(r["d_model"], r["n_pairs"]) for r in rows}):
        at = [r for r in rows if (r["d_model"], r["n_pairs"]) == (d, p)]
        ll = next((r for r in at if r["arch"] == BASELINE_ARCH), None)
        if ll is None:
            continue
        for a in linear_archs():  # a linear arch's cells at every head dim of this width
            for x in sorted((r for r in at if r["arch"] == a), key=lambda r: r.get("head_dim", 0)):
                se = np.hypot(ll["ci_high"] - ll["ci_low"], x["ci_high"] - x["ci_low"]) / (2 * 1.96)
                diff = ll["accuracy"] - x["accuracy"]
                name = f"{a} e{x['head_dim']}" if "head_dim" in x else a
                out.append((d, p, name, [diff, diff - 1.96 * se, diff + 1.96 * se]))
    return out


def retrieval(recall: dict | None, source: str) -> tuple[str, list[str]]:
    """Finding 3 from read_recall's dict (None: not run). Without the positive control (the
    baseline >= 0.9 in some cell) it is not measured; cells that did not train are left out."""
    from study.recall import control_sentence

    if not recall:
        return ("**not measured here**: run `python -m study --config=configs/study/recall.py "
                "--workdir=R` and pass `--config.recall_from=R`", [])
    left = recall.get("left_out", [(a, d, e, p, "did_not_train") for a, d, e, p in recall["did_not_train"]])
    names = ", ".join(f"{a} d{d} e{e} P={p} ({s.replace('_', ' ')})" for a, d, e, p, s in left)
    skipped = [f"Left out (no recall result in a shape where the control passed): {names}."] if left else []
    if not recall["control"]["met"]:
        return f"**not measured** ({control_sentence(recall['control'])})", skipped
    diffs = recall_differences(recall["rows"])
    if not diffs:
        return ("**not measured**: no linear architecture has a recall result (above the copy level) "
                "in a shape where the positive control passed", skipped)
    lead = sum(v[1] > 0 for *_, v in diffs)
    behind = sum(v[2] < 0 for *_, v in diffs)
    verdict = ("**reproduced**" if diffs and lead == len(diffs) else
               "**not reproduced**" if behind > lead else "**partly reproduced**")
    verdict += (f": LLaMA's MQAR accuracy is higher, resolved, in {lead} of {len(diffs)} "
                f"(width, pairs, linear arch) cells; lower, resolved, in {behind}")
    return verdict, [f"From {source} (MQAR; llama minus arch, seed-mean accuracy [95%]):", "",
                     "| d | pairs | arch | llama − arch |", "|---|---|---|---|",
                     *(f"| {d} | {p} | {a} | {_ci(v)} |" for d, p, a, v in diffs), "", *skipped]


def section(result: dict) -> tuple[list[str], dict]:
    """The report's findings section from study.verdicts.judge_all's `result`, and
    {finding: verdict} (the report writes the whole result to DIR/findings.json)."""
    est, by, fd = result["estimators"], result["by_estimator"], result["findings"]
    L = [SECTION, "", f"Each of the paper's qualitative findings, judged on this study's numbers under each loss "
         f"estimator ({', '.join(est)}); equivalence margin ±{result['margin']:g} nats, held-out "
         f"tolerance ±{result['tolerance']:g} nats (`python -m study.verdicts` gives the same from the "
         "tables). Verdicts follow the intervals, not the paper.", ""]
    titles = (("power_laws", "1. Power laws fit all four architectures"),
              ("equal_compute", f"2. Linear models match or beat {BASELINE_ARCH} in loss at equal compute"),
              ("retrieval", f"3. {BASELINE_ARCH} leads on retrieval"))
    verdicts = {}
    for key, title in titles:
        f = fd[key]
        extra = ("" if len(est) < 2 or "by_estimator" not in f else
                 " (" + "; ".join(f"{n}: {v}" for n, v in f["by_estimator"].items()) + ")")
        L += [f"**{title}:** **{f['verdict']}**{extra}.", ""]
        if key == "power_laws" and f["archs"]:
            L += power_laws(f, est, by) + [""]
        elif key == "equal_compute" and f["archs"]:
            L += equal_compute(f, est, by) + [""]
        elif key == "retrieval" and result.get("retrieval_lines"):
            L += result["retrieval_lines"] + [""]
        verdicts[key] = f["verdict"]
    return L, verdicts


def recall_rows_from(study) -> tuple[dict | None, str]:
    """read_recall of the recall study named by study.recall_from (its workdir), or (None, '')."""
    src = str(study.get("recall_from", "") or "")
    if not src:
        return None, ""
    path = os.path.join(src, RECALL_CSV)
    if not os.path.exists(path):
        raise FileNotFoundError(f"study.recall_from={src!r} has no recall.csv; run "
                                f"`python -m study --config=configs/study/recall.py --workdir={src}` first")
    return read_recall(path), path
