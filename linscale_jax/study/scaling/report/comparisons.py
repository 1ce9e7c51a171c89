"""The report's comparisons between the archs: the lowest loss at the largest common compute, the
exponents beside the paper's, the retrieval probes (NIAH, the line probe) and their heatmaps, and
the calibration of the verdicts.

A probe whose positive control failed, or that could not run where a model can pass (NIAH beyond
the trained context), is one "not measured: ..." line, with no heatmap; a difference row is
labelled "Δ llama − tnl", never "llama-tnl", so it cannot be read as a model.
"""

from __future__ import annotations

from linscale_jax import contract
from linscale_jax.study.scaling.report.laws import ci, exponents

NOT_MEASURED = "not measured"


def delta(arch: str, baseline: str = contract.BASELINE_ARCH) -> str:
    """The label of a difference row: 'Δ llama − tnl'."""
    return f"Δ {baseline} − {arch}"


def common_compute(doc) -> list[str]:
    found = doc.found
    L = ["## Comparisons (computed)", ""]
    c, law = found.get("common_compute") or {}, found.get("law_at_common_compute") or {}
    if c.get("runner_up"):
        def res(x):
            return ("resolved (the 95% interval of the difference excludes 0)" if x.get("resolved") else
                    "**not resolved** (the 95% interval of the difference includes 0)")
        L.append(f"**Lowest loss at the largest common compute C = {c['compute']:.3g} PF-days** (the largest "
                 f"compute every arch reaches with >= 2 sizes), measured on the envelopes: **{c['best']}** "
                 f"(share of draws where it is lowest: {c.get('p_best') or 0:.2f}); {c['runner_up']} is "
                 f"{ci(c['diff'], 3)} nats higher: {res(c)}.")
        L.append(f"By the fitted L(C) laws at the same C: **{law['best']}** (share of draws: "
                 f"{law.get('p_best') or 0:.2f}); {law['runner_up']} is {ci(law['diff'], 3)} higher: {res(law)}.")
        L += ["", "| arch | envelope loss at that C [95%] | fitted L(C) at that C [95%] |", "|---|---|---|"]
        L += [f"| {a} | {ci(v)} | {ci(law['by_arch'][a]) if a in law.get('by_arch', {}) else 'not fitted'} |"
              for a, v in sorted(c["by_arch"].items(), key=lambda kv: kv[1][0])]
        failed = max(list((c.get("failed") or {}).values()) + list((law.get("failed") or {}).values()) + [0.0])
        L += ["", "Both columns come from the paired draws of finding 2 (sizes fixed, checkpoint residuals "
              "shared between archs, seed offsets with the drawn seed sd), so they cover a re-run with other "
              f"seeds; failed draws: at most {failed:.0%} per arch. A difference whose interval includes 0 is "
              "reported as not resolved."]
    return L + [""] + exponents(doc) + probes(doc)


def _probe(title: str, p: dict | None, what: str) -> list[str]:
    """A probe's lines: its accuracies and difference rows, or one 'not measured' line."""
    if not p:
        return []
    if p.get("not_measured"):
        return [f"**{title}**: {NOT_MEASURED}: {p['not_measured']}.", ""]
    L = [f"**{title}** ({what}):", ""]
    L += [f"- {a}: {ci(v, 3)}" for a, v in p["by_arch"].items()]
    minus = p.get("minus_baseline", {k.split("-", 1)[1]: v for k, v in p.get("diffs", {}).items()})  # older files
    L += [f"- {delta(a, p.get('baseline', contract.BASELINE_ARCH))}: {ci(v, 3)}" for a, v in minus.items()]
    return L + [""]


def probes(doc) -> list[str]:
    pr = doc.found.get("probes") or {}
    L = _probe("Retrieval, NIAH", pr.get("niah"), "largest model of each arch, lengths within the trained "
               "context; mean cell accuracy [95%, cells bootstrapped]; the positive control: the baseline "
               "retrieves a needle exactly")
    L += _probe("Line probe", pr.get("probe"), "pick the true next line among 4, chance "
                f"{(pr.get('probe') or {}).get('chance', 0.25):.2f}; largest model of each arch, lm-eval acc "
                "[95%, normal approximation]; the positive control: the baseline above chance")
    return L


def niah_heatmaps(doc) -> list[str]:
    """Each arch's heatmap when NIAH measured something; else the one 'not measured' line."""
    p = (doc.found.get("probes") or {}).get("niah")
    if not p:
        return []
    title = "## NIAH heatmaps (largest model of each arch, final checkpoint)"
    if p.get("not_measured"):
        return [title, "", f"{NOT_MEASURED}: {p['not_measured']}.", ""]
    L = [title, ""]
    largest = {}
    for r in doc.found["runs"]:
        if not r["seed"] and r["n_params"] >= largest.get(r["arch"], {}).get("n_params", 0):
            largest[r["arch"]] = r
    for r in largest.values():
        if r.get("niah_heatmap"):
            L += [f"**{r['name']}** ({r['niah_task']}, weighted acc {r['niah_weighted_acc']:.3f}, "
                  f"NIAH score {r['niah_score']:.3f}): ![{r['name']}]({r['niah_heatmap']})", ""]
    return L


def calibration(doc) -> list[str]:
    cal = doc.calibration
    if not cal:
        return []
    L = ["## Calibration of the verdicts on this study's design", "",
         "`python -m linscale_jax.study --config=calibrate` simulates studies with this study's sizes, checkpoints, tokens, "
         "replicates and estimators under the noise model its intervals assume: each size's true curve is "
         "llama's trend (changed per case), each run adds its arch's checkpoint noise (AR(1) with the sd and "
         "lag-1 autocorrelation of its trend residuals) and a seed effect at 1× and 3× the measured seed sd, as "
         "offsets and as slope changes (a quarter of the studies each); the same verdict code judges them. Shares "
         "of finding-2 verdicts over every linear arch and estimator; the resolved share per seed-effect scenario "
         "is the false one in the nulls and the correct one with an effect. The 1× offset scenario is the model "
         "behind the MDE column of finding 2: its power crosses 80% at the MDE. Widths: the share of pairs of "
         "simulated studies (1× offset) whose 95% intervals' widths agree within 1.5×.", ""]
    for d in cal["designs"]:
        model = (f" The study's own noise model gives power {d['study_power']:.0%} at {d['effect']:g} nats "
                 "(its MDEs, averaged over archs and estimators)." if d.get("study_power") is not None else "")
        L += [f"**{d['design']}** ({d['runs']} runs, {d['cost']['text']}; `{d['command']}`, "
              f"{d['seconds']:.0f} s, {d['seeds']} studies per case):", "",
              "| case | better | worse | equivalent | not_resolved | target | "
              + " | ".join(d["scenarios"]) + " | widths within 1.5× |",
              "|---|---|---|---|---|---|" + "---|" * len(d["scenarios"]) + "---|"]
        for x in d["cases"]:
            w = (x.get("widths") or {}).get("within")
            L.append(f"| {x['case']} | {x['better']:.0%} | {x['worse']:.0%} | {x['equivalent']:.0%} | "
                     f"{x['not_resolved']:.0%} | {x['target']} | "
                     + " | ".join(f"{x['by_scenario'][s]['resolved']:.0%}" for s in d["scenarios"])
                     + f" | {'—' if w is None else f'{w:.0%}'} |")
        L += ["", d["summary"] + model, ""]
    return L
