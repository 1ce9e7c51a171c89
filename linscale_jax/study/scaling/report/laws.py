"""The report's sections on the fitted laws: the allocation laws, how well the envelope brackets the
optimum, the measured optimum, the laws beside the paper's Table 3 and the noise behind them.

Every row that sets an N_opt(C) or D_opt(C) law beside the paper's says so when the law is a bound
(`bound_note`: the envelope mostly clamped, its clamped points kept), so a bound is never read as a
measurement.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.study.scaling import findings, holdout

LAWS = (("L_C", "L(C)"), ("N_opt_C", "N_opt(C)"), ("D_opt_C", "D_opt(C)"))


def ci(x, digits=4) -> str:
    v, lo, hi = x
    if lo is None or not np.isfinite(lo):
        return f"{v:.{digits}g}"
    return f"{v:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


def law_text(e: dict) -> str:
    c, x = (e.get("ci95") or {}).get("coefficient"), (e.get("ci95") or {}).get("exponent")
    s = f"{e['coefficient']:.4g}·C^{e['exponent']:+.4f}"
    if c and x:
        s += f" (coef [{c[0]:.3g}, {c[1]:.3g}], exp [{x[0]:+.4f}, {x[1]:+.4f}])"
    return s


def bound_note(doc, arch: str, key: str) -> str:
    """'' for L(C) or a law on mostly interior points; else 'a bound, not a measurement (interior
    on 19% of the grid)': the N_opt / D_opt law of an envelope whose clamped points were kept and
    make up more than approach1.MOSTLY_BOUNDS of it."""
    from linscale_jax.fit.approach1 import MOSTLY_BOUNDS

    if key == "L_C" or not doc.found["design"]["include_clamped"]:
        return ""
    s = ((doc.found.get("bracketing") or {}).get(doc.found["estimators"][0]) or {}).get(arch)
    if not s or 1 - s["interior"] <= MOSTLY_BOUNDS:
        return ""
    return f"a bound, not a measurement (interior on {s['interior']:.0%} of the grid)"


def allocation(doc) -> list[str]:
    L = ["## Compute-optimal allocation N_opt(C), D_opt(C)", "", "![allocation](fit/allocation.png)", "",
         "| arch | N_opt(C) ours | D_opt(C) ours |", "|---|---|---|"]
    for a, e in doc.fits.items():
        cells = [(f"**{n}**: " if (n := bound_note(doc, a, k)) else "") + law_text(e[k]) for k in ("N_opt_C", "D_opt_C")]
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    return L + bracketing(doc)


def bracketing(doc) -> list[str]:
    found = doc.found
    br = found.get("bracketing") or {}
    L = ["", "### How well the envelope brackets the optimum", "",
         "Share of the log-compute grid (256 points between each arch's first and last checkpoint) where "
         "the lowest loss comes from an interior size (a real optimum), from the smallest or the largest "
         "size reaching that compute (a bound: the optimum may lie outside the trained sizes), or where only "
         "one size reaches it (`fit/bracketing.csv`).", "",
         "| arch | estimator | interior | smallest wins | largest wins | one size |", "|---|---|---|---|---|---|"]
    for est, archs in br.items():
        for a, s in archs.items():
            L.append(f"| {a} | {est} | " + " | ".join(f"{s[k]:.0%}" for k in
                                                      ("interior", "smallest", "largest", "one_size")) + " |")
    smallest = [s["smallest"] for archs in br.values() for s in archs.values()]
    if smallest and max(smallest) > 0.5:
        L += ["", "At most computes the smallest size that reaches them has the lowest loss: every run here is "
              "still data-limited (loss keeps falling with tokens faster than it falls with parameters), so "
              "more tokens beat more parameters at every budget this study reaches. "
              + ("The N_opt(C) and D_opt(C) laws above are fitted to the whole envelope (as the paper does), "
                 "so they trace where the runs end: read them as bounds, not as measured optima. "
                 if found["design"]["include_clamped"] else "")
              + "Bracketing the optimum needs runs long enough for the smallest models to saturate "
              "(the paper trains its smallest model on ~4,000 tokens per parameter)."]
        L += tokens_per_param_table(found)
    return L + optimum(doc)


def tokens_per_param_table(found: dict) -> list[str]:
    """Per arch and size: tokens per parameter at the optimum of the laws' L(N, D) against each run's
    own at its end. Where the law wants more than a run has, only a smaller size reaching that
    compute can win there: the budgets study.tokens_by_size gives the small sizes close that gap
    (study.scaling.bracket_design predicts the bracketing of a budget per size)."""
    from linscale_jax.study.scaling.bracket_design import tokens_per_param_at_optimum

    laws = (found.get("laws_nd") or {}).get(found["estimators"][0]) or {}
    rows = []
    for a, entry in laws.items():
        ends = sorted({(r["n_params"], r["tokens"]) for r in found.get("runs", []) if r["arch"] == a})
        if "law" not in entry or not ends:
            continue
        cells = [f"{tokens_per_param_at_optimum(entry['law'], n):.3g} / {d / n:.3g}" for n, d in ends]
        rows.append(f"| {a} | " + ", ".join(cells) + " |")
    if not rows:
        return []
    return ["", "Tokens per parameter at the optimum of each arch's L(N, D) against each run's own at its "
            "end, size by size from the smallest (law / run): a run short of its law's figure cannot reach "
            "the compute where the next size up becomes optimal. Budgets per size (`study.tokens_by_size`, "
            "longer at the small sizes) close that gap; `study.scaling.bracket_design.predict_study(DIR, "
            "tokens)` predicts their bracketing from this study's laws and noise.", "",
            "| arch | tokens per parameter, law / run, by size |", "|---|---|", *rows]


def optimum(doc) -> list[str]:
    found = doc.found
    ref = found.get("reference_tokens_per_param") or {}
    L = ["", "### The measured optimum: N_opt, D_opt and tokens per parameter", "",
         f"Where the envelope ({found['estimators'][0]}) is interior, its winner is a measured optimum: N_opt "
         "under the paper's count (Table 1, non-embedding), the parameter tree's non-embedding count and "
         "the count with the embedding and the head (model config accounting), and D_opt; tokens per "
         "parameter at the optimum is D_opt / N_opt (median [range] over the interior grid points).", "",
         "| arch | interior | C range (PF-days) | N_opt paper | N_opt tree | N_opt with embedding + head | "
         "D_opt | tokens/param (paper count) | tokens/param (with embedding + head) |",
         "|---|---|---|---|---|---|---|---|---|"]
    for a, o in (found.get("optimum") or {}).items():
        if not o["points"]:
            L.append(f"| {a} | 0% | not measured: no interior point (bounds only) | | | | | | |")
            continue
        n, t = o["n_opt"], o["tokens_per_param"]

        def rng(k, src=n):
            return "—" if k not in src else f"{src[k][0]:.3g} .. {src[k][1]:.3g}"

        def tpp(k):
            return "—" if k not in t else f"{t[k]['median']:.3g} [{t[k]['low']:.3g}, {t[k]['high']:.3g}]"
        L.append(f"| {a} | {o['interior']:.0%} | {o['compute'][0]:.3g} .. {o['compute'][1]:.3g} | {rng('paper')} | "
                 f"{rng('non_embedding')} | {rng('total')} | {o['d_opt'][0]:.3g} .. {o['d_opt'][1]:.3g} | "
                 f"{tpp('paper')} | {tpp('total')} |")
    if ref:
        L += ["", "Tokens per parameter at the optimum elsewhere: Chinchilla (Hoffmann et al. 2022, embeddings "
              f"counted) about {ref['chinchilla']:g}; "
              + "; ".join(f"{p['label']}: {p['tokens_per_param']:,.0f} (N_opt {p['n_opt']:.3g})" for p in ref["porian"])
              + " (Porian et al. 2024, RefinedWeb at 1.25e16 FLOPs, `linscale_jax/fit/data/porian2024_optimal_pairs.csv`)."]
    return L + [""]


def table3(doc) -> list[str]:
    """Our laws beside Table 3's, a bound labelled as one in its row (bound_note)."""
    from linscale_jax.fit import paper

    L = ["## Fitted laws beside the paper's Table 3", "",
         "| arch | law | ours (95% interval) | paper Table 3 |", "|---|---|---|---|"]
    for a, e in doc.fits.items():
        for key, label in LAWS:
            p = paper.TABLE3.get(a, {}).get(key)
            note = bound_note(doc, a, key)
            ours = f"**{note}**: {law_text(e[key])}" if note else law_text(e[key])
            L.append(f"| {a} | {label} | {ours} | {p if p is not None else 'n/a'} |")
    for a, err in (doc.found.get("fit_errors") or {}).items():
        L.append(f"\n**Not fitted: {a}** — {err}")
    return L + ["", "![ours vs paper](fit/paper_overlay.png)", ""]


def exponents(doc) -> list[str]:
    """The exponents side by side with the paper's; a bound's cell says so."""
    from linscale_jax.fit import paper

    L = ["**Exponents side by side** (ours [95%] / paper; a law fitted mostly to bounds is marked and is "
         "not comparable):", "", "| arch | L(C) | N_opt(C) | D_opt(C) |", "|---|---|---|---|"]
    for a, e in doc.fits.items():
        cells = []
        for key, _ in LAWS:
            iv = (e[key].get("ci95") or {}).get("exponent") or [None, None]
            p = paper.TABLE3.get(a, {}).get(key)
            note = bound_note(doc, a, key)
            cells.append((f"{note}: " if note else "") + f"{ci([e[key]['exponent'], *iv])} / {p.exponent if p else 'n/a'}")
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    return L + [""]


def prior_cell(check) -> str:
    """The prior's sd and df with the F test of this study's sd against it (fit.bootstrap.with_prior)."""
    if not check:
        return "—"
    p = check["prior"]
    test = "" if check.get("p") is None else f"; F {check['f']:.2f}, p {check['p']:.2g}"
    return f"{p['sd']:.4f} ({p['df']:g} df{test}): " + ("pooled" if check["used"] else "**rejected**, not used")


def noise(doc) -> list[str]:
    """Seed-to-seed sd per arch and estimator with df and interval, the pooled one the draws use,
    each run's smoothness, and each arch's L(N, D) lack of fit."""
    found = doc.found
    est, by = found["estimators"], found["by_estimator"]

    def sd_cell(s):
        if not s["df"] and not s["sd"]:
            return "not measured (no replicate runs)"
        iv = s.get("ci95")
        return (f"{s['sd']:.4f}" + (f" ({s['df']:g} df) [{iv[0]:.3g}, {iv[1]:.3g}]" if iv else f" ({s['source']})"))

    archs = list(by[est[0]]["seed_sd"])
    L = ["## Noise", "", "Seed-to-seed sd of one run's loss (nats): sd over the replicate seeds of a size of each "
         "replicate's mean over its second half of checkpoints (study.replicates), with its degrees of "
         "freedom and the 95% interval of the true sd (χ²). The intervals of the verdicts and the held-out "
         "checks use the sd pooled over the archs (df summed), each draw taking its sd from that "
         "estimate's scaled inverse-χ² distribution, so the sd's own uncertainty widens every interval.", "",
         "| arch | " + " | ".join(est) + " |", "|---|" + "---|" * len(est)]
    for a in archs:
        L.append(f"| {a} | " + " | ".join(sd_cell(by[n]["seed_sd"][a]) if a in by[n]["seed_sd"] else "—"
                                          for n in est) + " |")
    if any(by[n].get("seed_sd_prior") for n in est):  # study.noise.prior: other studies of this design
        L.append("| this study, pooled over the archs | "
                 + " | ".join(sd_cell(by[n]["seed_sd_own"]) for n in est) + " |")
        L.append("| prior (other studies of this design) | " + " | ".join(
            prior_cell(by[n].get("seed_sd_prior")) for n in est) + " |")
    L.append("| **pooled (the draws')** | " + " | ".join(sd_cell(by[n]["seed_sd_pooled"]) for n in est) + " |")
    if found.get("seed_sd_prior"):
        L += ["", f"Seed sd prior (study.noise.prior): {found['seed_sd_prior']}. A prior is pooled with this "
              "study's own sd (df-weighted variances, df summed) unless an F test rejects one sd (p < 0.05)."]
        if all(not by[n]["seed_sd_own"]["df"] and (by[n].get("seed_sd_prior") or {}).get("used") for n in est):
            L[-1] += (" This study trains no replicate seeds (study.replicates), so the intervals use the "
                      "prior's sd alone and nothing here checks it.")
    L += ["", "Smoothness of the laws' curves (not a noise sd: neighbouring checkpoints are correlated, and "
          "for val_loss_avg they share weights): RMS residual of the second half of every run around its "
          "quadratic trend in ln C, and the share of successive checkpoints whose loss rises.", "",
          "| arch | residual around the trend (nats) | rising share |", "|---|---|---|"]
    for a, v in (found.get("checkpoint_sd") or {}).items():
        L.append(f"| {a} | " + (f"{v['sd']:.4f} | {v['rise']:.0%}" if v.get("sd") is not None else
                                "— (too few checkpoints) | —") + " |")
    L += ["", "Lack of fit of each arch's L(N, D) = E + A/N^α + B/D^β (approach 3, every size): per size the mean residual over the second half of its "
          "checkpoints against the seed sd, F = Σ r ū² / ((m − 3) s²) on (m − 3, ν) df; a small p says the "
          "law misses the sizes by more than seed noise. The L(C) law's lack of fit is in finding 1's table.", "",
          "| arch | estimator | E, A, α, B, β | rms residual | lack of fit: rms of size means, F (df), p |",
          "|---|---|---|---|---|"]
    for n, archs_nd in (found.get("laws_nd") or {}).items():
        for a, r in archs_nd.items():
            if "law" not in r:
                L.append(f"| {a} | {n} | not fitted: {r.get('note', '')} | | |")
                continue
            w = r["law"]
            L.append(f"| {a} | {n} | {w['E']:.3g}, {w['A']:.3g}, {w['alpha']:.3g}, {w['B']:.3g}, {w['beta']:.3g}"
                     f"{holdout.bound_note(w)} | "
                     f"{r['resid_sd']:.4f} | {findings.lack_of_fit_text(r['lack_of_fit'])} |")
    return L + [""]
