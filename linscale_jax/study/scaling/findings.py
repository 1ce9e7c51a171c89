"""The report's section on the paper's three findings, rendered from findings.json; the recall input.

    lines, verdicts = section(found)       # found = DIR/findings.json (study.results)

1. Power laws fit every architecture (study.verdicts.power_laws: the L(C) exponent's interval below
   0 and the largest size predicted within a stated tolerance by the law fitted without it).
2. Linear models match or beat the baseline (contract.BASELINE_ARCH) in loss at equal compute: each
   linear arch (registry.linear_archs) minus the baseline at the largest common compute, by the
   fitted L(C) laws: better / worse / equivalent (TOST, ±margin) / not_resolved; beside it the
   measured (envelope) difference, the minimal detectable effect and the failed share.
3. The baseline leads on retrieval: the MQAR recall experiment (configs/study/recall.py, read from
   study.recall_from via study.recall.verdict_input), baseline minus each linear arch per (width,
   pairs) cell with a normal interval from the cells' intervals (query noise and seed spread);
   "not measured" unless the baseline's positive control (>= 0.9 in some cell) is met; only recall
   results (above the copy level) of the paper's mixers in (width, pairs) shapes where the control
   passed count, the other cells are listed as left out.
Every finding is judged under each loss estimator the study computed; where they disagree the
verdict is "depends on the estimator", with each estimator's values shown; likewise "depends on the
learning-rate protocol" against a study of the other protocol (study.protocol_from).
"""

from __future__ import annotations

import os

import numpy as np

from linscale_jax.contract import BASELINE_ARCH
from linscale_jax.study.files import RECALL_CSV

SECTION = "## The paper's findings in miniature"
TITLES = (("power_laws", "1. Power laws fit every architecture"),
          ("equal_compute", f"2. Linear models match or beat {BASELINE_ARCH} in loss at equal compute"),
          ("retrieval", f"3. {BASELINE_ARCH} leads on retrieval"))


def _ci(v, digits=3) -> str:
    return f"{v[0]:+.{digits}f} [{v[1]:+.{digits}f}, {v[2]:+.{digits}f}]"


def linear_archs() -> tuple[str, ...]:
    from linscale_jax.models import registry

    return registry.linear_archs()


def _f(x, fmt="+.3f") -> str:
    return "—" if x is None else format(x, fmt)


def _diff(e: dict) -> str:
    """'+0.175 [+0.067, +0.281]' of a row with diff and its 95% interval."""
    if e.get("diff") is None:
        return "—"
    return f"{e['diff']:+.3f} " + ("no interval" if e.get("ci_low") is None else
                                   f"[{e['ci_low']:+.3f}, {e['ci_high']:+.3f}]")


def label(e: dict) -> str:
    """A row's verdict as the report writes it: 'not_resolved (fit unstable)' for an unstable fit."""
    v = e.get("verdict") or "—"
    return f"{v} ({e['reason']})" if e.get("reason") else v


def _protocols(f: dict) -> str:
    bp = f.get("by_protocol")
    return "" if not bp else " (" + "; ".join(f"{k}: {v}" for k, v in bp.items()) + ")"


def lack_of_fit_text(lof: dict | None) -> str:
    """'0.021, F 1.13 (2, 4), p 0.41' of fit.holdout.lack_of_fit's dict."""
    if not lof or "rms" not in lof:
        return (lof or {}).get("note", "—")
    if lof.get("F") is None:
        return f"{lof['rms']:.3f}, {lof.get('note', '—')}"
    df2 = "∞" if lof["df2"] is None else f"{lof['df2']:g}"
    return f"{lof['rms']:.3f}, F {lof['F']:.2f} ({lof['df1']}, {df2}), p {lof['p']:.2g}"


def power_laws(f: dict, est: list[str], by: dict) -> list[str]:
    """Finding 1's table: per arch and estimator, exponent [95%], held-out errors [95%], the L(C)
    law's lack of fit, verdict."""
    L = ["| arch | estimator | L(C) exponent [95%] | held-out: actual − predicted [95%] | "
         "lack of fit of L(C): rms, F (df), p | failed | verdict |", "|---|---|---|---|---|---|---|"]
    for a in f["archs"]:
        for n in est:
            r = by[n]["power_laws"]["archs"].get(a, {})
            x, ci = r.get("exponent"), r.get("exponent_ci")
            ex = "—" if x is None else f"{x:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")
            hs = r.get("holdout") or []
            ho = "; ".join(f"N={h['n_params']:.3g}: {_diff(h)}" for h in hs) or r.get("note", "—")
            failed = max([r.get("failed") or 0.0] + [h.get("failed") or 0.0 for h in hs])
            L.append(f"| {a} | {n} | {ex} | {ho} | {lack_of_fit_text(r.get('lack_of_fit'))} | {failed:.0%} | "
                     f"{label(r)} |")
    return L


def equal_compute(f: dict, est: list[str], by: dict, margin: float) -> list[str]:
    """Finding 2's table: per arch and estimator, the fitted and the measured difference at C*, the
    minimal detectable effect, the 90% half-width against the margin, the failed share, verdict."""
    L = [f"At C* = {f['compute']:.3g} PF-days (the largest compute every arch reaches with >= 2 sizes): "
         f"arch − {BASELINE_ARCH} in nats, fitted (each arch's L(C) law) and measured (the envelope's loss "
         "there), with 95% intervals from paired draws of the whole study (sizes fixed; the same "
         "checkpoint-noise draw for both archs; seed offsets whose sd is drawn from its measured "
         "distribution). MDE: the smallest true difference the fitted comparison resolves in 80% of "
         "studies like this one (the draws' variance split into its checkpoint and seed parts, each re-run's "
         "interval as wide as its own measured seed sd makes it; `--config=calibrate` simulates the same "
         f"model). Equivalence needs the 90% half-width below the margin ±{margin:g}. "
         "Failed: the share of draws whose fit failed (over 10%: not_resolved, fit unstable).", "",
         f"| arch | estimator | fitted: arch − {BASELINE_ARCH} [95%] | measured at C* [95%] | MDE | "
         "90% half-width | failed | verdict |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    for a, row in f["archs"].items():
        for n in est:
            r = by[n]["equal_compute"]["archs"].get(a, {})
            m = r.get("measured") or {}
            hw = r.get("halfwidth90")
            hw_text = "—" if hw is None else f"{hw:.3f}" + ("" if hw < margin else " (equivalence out of reach)")
            L.append(f"| {a} | {n} | {_diff(r)} | {_diff(m)} {label(m) if m else ''} | {_f(r.get('mde'), '.3f')} | "
                     f"{hw_text} | {_f(r.get('failed'), '.0%')} | {label(r)} |")
            if r.get("note"):
                notes.append(f"{a} ({n}): {r['note']}.")
    L += ["", "Verdict per arch" + (" (over estimators and learning-rate protocols)" if any(
        r.get("by_protocol") for r in f["archs"].values()) else " (over estimators)") + ": "
          + "; ".join(f"{a} **{r['verdict']}**{_protocols(r)}" for a, r in f["archs"].items()) + "."]
    return L + ([""] + notes if notes else [])


def read_recall(path: str) -> dict:
    """study.recall.verdict_input of DIR/recall.csv: the seed-mean recall results in shapes where the
    positive control passed, the control and the cells left out."""
    from linscale_jax.study.recall.table import verdict_input

    return verdict_input(path)


def recall_differences(rows: list[dict], variants: bool = False) -> list[tuple]:
    """(d_model, n_pairs, arch, [baseline − arch, lo, hi]) per cell of trained seed-mean rows of the
    paper's linear archs (variants=True: of their variant labels, e.g. tnl+short_conv=4): normal
    interval from each row's 95% interval, which holds the seed spread."""
    out = []
    labels = sorted({r["arch"] for r in rows if r.get("variant")}) if variants else linear_archs()
    for d, p in sorted({(r["d_model"], r["n_pairs"]) for r in rows}):
        at = [r for r in rows if (r["d_model"], r["n_pairs"]) == (d, p)]
        ll = next((r for r in at if r["arch"] == BASELINE_ARCH), None)
        if ll is None:
            continue
        for a in labels:  # a label's cells at every head dim of this width
            for x in sorted((r for r in at if r["arch"] == a), key=lambda r: r.get("head_dim", 0)):
                se = np.hypot(ll["ci_high"] - ll["ci_low"], x["ci_high"] - x["ci_low"]) / (2 * 1.96)
                diff = ll["accuracy"] - x["accuracy"]
                name = f"{a} e{x['head_dim']}" if "head_dim" in x else a
                out.append((d, p, name, [diff, diff - 1.96 * se, diff + 1.96 * se]))
    return out


def retrieval(recall: dict | None, source: str) -> tuple[str, list[str]]:
    """Finding 3 from read_recall's dict (None: not run). Without the positive control (the
    baseline >= 0.9 in some cell) it is not measured; only recall results in shapes where the
    control passed, allowed at least its steps, count (read_recall's rows); the other cells are
    listed as left out."""
    from linscale_jax.study.recall.table import control_sentence
    from linscale_jax.study.recall.table import FEWER_STEPS

    if not recall:
        return ("**not measured here**: run `python -m linscale_jax.study --config=recall "
                "--workdir=R` and pass `--config.recall_from=R`", [])
    left = recall.get("left_out", [(a, d, e, p, "did_not_train") for a, d, e, p in recall["did_not_train"]])
    names = ", ".join(f"{a} d{d} e{e} P={p} ({s.replace('_', ' ')})" for a, d, e, p, s in left)
    skipped = [f"Left out (no recall result at the control's shape and steps): {names}."] if left else []
    if not recall["control"]["met"]:
        return f"**not measured** ({control_sentence(recall['control'])})", skipped
    diffs = recall_differences(recall["rows"])
    if not diffs:
        fewer = any(x[-1] == FEWER_STEPS for x in left)
        d, e, _ = recall["control"]["cell"]
        return ("**not measured**: no linear architecture has a recall result (above the copy level) "
                "in a shape where the positive control passed, allowed at least the control's steps"
                + (f"; the linear archs were allowed fewer: `--config.shapes=d{d}e{e} "
                   f"--config.max_steps={recall['control_steps']}` measures it" if fewer else ""), skipped)
    lead = sum(v[1] > 0 for *_, v in diffs)
    behind = sum(v[2] < 0 for *_, v in diffs)
    verdict = ("**reproduced**" if diffs and lead == len(diffs) else
               "**not reproduced**" if behind > lead else "**partly reproduced**")
    verdict += (f": LLaMA's MQAR accuracy is higher, resolved, in {lead} of {len(diffs)} "
                f"(width, pairs, linear arch) cells; lower, resolved, in {behind}")
    beside = recall_differences(recall["rows"], variants=True)
    b = BASELINE_ARCH
    return verdict, [f"From {source} (MQAR; {b} minus each arch, seed-mean accuracy [95%]):", "",
                     "| d | pairs | difference | [95%] |", "|---|---|---|---|",
                     *(f"| {d} | {p} | Δ {b} − {a} | {_ci(v)} |" for d, p, a, v in diffs), "",
                     *([f"Beside the verdict (not the paper's mixers): " + "; ".join(
                         f"Δ {b} − {a} at d {d}, {p} pairs {_ci(v)}" for d, p, a, v in beside) + ".",
                        ""] if beside else []), *skipped]


def section(result: dict) -> tuple[list[str], dict]:
    """The report's findings section from findings.json (study.results), and {finding: verdict}."""
    est, by, fd = result["estimators"], result["by_estimator"], result["findings"]
    prot = result.get("protocols")
    L = [SECTION, "", f"Each of the paper's qualitative findings, judged on this study's numbers under each loss "
         f"estimator ({', '.join(est)}); equivalence margin ±{result['margin']:g} nats, held-out "
         f"tolerance ±{result['tolerance']:g} nats (`python -m linscale_jax.study.scaling.verdicts` gives the same from the "
         "tables). Verdicts follow the intervals, not the paper."
         + (f" Every finding is also judged under the other learning-rate protocol, read from "
            f"`{prot['source']}` ({' vs '.join(prot['labels'])}); where the two disagree the verdict is "
            "\"depends on the learning-rate protocol\"." if prot else ""), ""]
    verdicts = {}
    for key, title in TITLES:
        f = fd[key]
        extra = ("" if len(est) < 2 or "by_estimator" not in f else
                 " (" + "; ".join(f"{n}: {v}" for n, v in f["by_estimator"].items()) + ")")
        L += [f"**{title}:** **{f['verdict']}**{extra}{_protocols(f)}.", ""]
        if key == "power_laws" and f["archs"]:
            L += power_laws(f, est, by) + [""]
            if (f.get("bias") or {}).get("n"):
                from linscale_jax.study.scaling.holdout import bias_text

                L += [f"Held-out errors of finding 1 ({est[0]}): {bias_text(f['bias'])}.", ""]
        elif key == "equal_compute" and f["archs"]:
            L += equal_compute(f, est, by, result["margin"]) + [""]
        elif key == "retrieval" and result.get("retrieval_lines"):
            L += result["retrieval_lines"] + [""]
        verdicts[key] = f["verdict"]
    return L, verdicts


def console_lines(found: dict) -> list[str]:
    """One line per finding for the study's console: its verdict, and finding 2's per arch."""
    out = []
    for key, title in TITLES:
        f = found["findings"][key]
        archs = (", ".join(f"{a} {r['verdict']}" for a, r in f.get("archs", {}).items())
                 if key == "equal_compute" else "")
        out.append(f"[study] {title}: {f['verdict']}" + (f" ({archs})" if archs else ""))
    return out


def recall_rows_from(study) -> tuple[dict | None, str]:
    """read_recall of the recall study named by study.recall_from (its workdir), or (None, '')."""
    src = str(study.get("recall_from", "") or "")
    if not src:
        return None, ""
    path = os.path.join(src, RECALL_CSV)
    if not os.path.exists(path):
        raise FileNotFoundError(f"study.recall_from={src!r} has no recall.csv; run "
                                f"`python -m linscale_jax.study --config=recall --workdir={src}` first")
    return read_recall(path), path
