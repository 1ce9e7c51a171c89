"""DIR/report.md of a study, rendered from the study's data files; it computes nothing.

    path = write_report(workdir)      # report.md + report/loss_vs_compute.png, report/holdout.png

Renders DIR/findings.json (study.results: verdicts, seed sds, comparisons, bracketing, optimum,
runs, wall time), DIR/fit/fits.json (+ its PNGs), DIR/holdout.json (study.holdout) and, when
`python -m linscale_jax.study --config=calibrate` has run, DIR/calibration.json. The plots draw DIR/fit/table.csv,
DIR/fit/envelope.csv, DIR/holdout_curves.csv and the fitted laws. Rerendering (e.g. after the
calibration) gives the same numbers.
"""

from __future__ import annotations

import json
import os

import numpy as np

from linscale_jax import contract
from linscale_jax.study.scaling import findings, holdout
from linscale_jax.study.scaling import laws as scaling_laws

LAWS = (("L_C", "L(C)"), ("N_opt_C", "N_opt(C)"), ("D_opt_C", "D_opt(C)"))


def _ci(x, digits=4) -> str:
    v, lo, hi = x
    if lo is None or not np.isfinite(lo):
        return f"{v:.{digits}g}"
    return f"{v:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


def _law(e: dict) -> str:
    ci = e.get("ci95") or {}
    c, x = ci.get("coefficient"), ci.get("exponent")
    s = f"{e['coefficient']:.4g}·C^{e['exponent']:+.4f}"
    if c and x:
        s += f" (coef [{c[0]:.3g}, {c[1]:.3g}], exp [{x[0]:+.4f}, {x[1]:+.4f}])"
    return s


def _read(path: str):
    return json.load(open(path)) if os.path.exists(path) else None


def plot_loss_vs_compute(table, envelope_csv: str, fits: dict, path: str) -> None:
    """Every arch's runs, its envelope (fit/envelope.csv, the laws' estimator) and its fitted L(C)."""
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    env = list(csv.DictReader(open(envelope_csv))) if os.path.exists(envelope_csv) else []
    first = env[0]["estimator"] if env else None
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, arch in enumerate(table.archs):
        col = plt.get_cmap("tab10")(i)
        sub = table.select(arch)
        for _, r in sub.runs():
            ax.plot(r.flops, r.loss, color=col, lw=0.6, alpha=0.35)
        pts = [r for r in env if r["arch"] == arch and r["estimator"] == first]
        if pts:
            ax.plot([float(r["compute"]) for r in pts], [float(r["loss"]) for r in pts], color=col, lw=2,
                    label=f"{arch} envelope")
        if arch in fits:
            span = np.geomspace(sub.flops.min(), sub.flops.max(), 50)
            law = fits[arch]["L_C"]
            ax.plot(span, law["coefficient"] * span ** law["exponent"], "--", color=col, lw=1.2,
                    label=f"{arch} L = {law['coefficient']:.3g}·C^{law['exponent']:+.3f}")
    ax.set(xscale="log", yscale="log", xlabel="compute C (PF-days, Table-1 accounting)",
           ylabel="validation loss (nats/byte-token)", title="loss vs compute: runs, envelopes, fitted laws")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _scale_section(d: dict, runs: list[dict]) -> list[str]:
    from linscale_jax.models.sizes import PAPER_CONTEXT, PAPER_VOCAB

    ns = [r["n_params"] for r in runs]
    pf = [r["pf_days"] for r in runs]
    return [
        "## Scale difference from the paper",
        f"- Parameters (non-embedding): {min(ns):.3g} .. {max(ns):.3g} "
        f"({np.log10(max(ns) / min(ns)):.2f} decades) here vs 7e7 .. 7e9 in the paper (~1e3-1e4x smaller).",
        f"- Tokens per run: {d['tokens']:.3g} here vs 3e11 in the paper ({3e11 / d['tokens']:.2g}x fewer); "
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


def _bracketing_section(found: dict) -> list[str]:
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
    return L + _optimum_section(found)


def _optimum_section(found: dict) -> list[str]:
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
            L.append(f"| {a} | 0% | no interior point: not measured (bounds only) | | | | | | |")
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
    return L


def _noise_section(found: dict) -> list[str]:
    """Seed-to-seed sd per arch and estimator with df and interval, the pooled one the draws use,
    each run's smoothness, and each arch's L(N, D) lack of fit."""
    est, by = found["estimators"], found["by_estimator"]

    def sd_cell(s):
        ci = s.get("ci95")
        return (f"{s['sd']:.4f}" + (f" ({s['df']:g} df) [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else f" ({s['source']})"))

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
    L.append("| **pooled (the draws')** | " + " | ".join(sd_cell(by[n]["seed_sd_pooled"]) for n in est) + " |")
    L += ["", "Smoothness of the laws' curves (not a noise sd: neighbouring checkpoints are correlated, and "
          "for val_loss_avg they share weights): RMS residual of the second half of every run around its "
          "quadratic trend in ln C, and the share of successive checkpoints whose loss rises.", "",
          "| arch | residual around the trend (nats) | rising share |", "|---|---|---|"]
    for a, v in (found.get("checkpoint_sd") or {}).items():
        L.append(f"| {a} | " + (f"{v['sd']:.4f} | {v['rise']:.0%}" if v.get("sd") is not None else
                                "— (too few checkpoints) | —") + " |")
    L += ["", "Lack of fit of each arch's L(N, D) = E + A/N^α + B/D^β (approach 3, every size; the law "
          "`python -m linscale_jax.study --config=calibrate` simulates from): per size the mean residual over the second half of its "
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


def _comparisons(found: dict, fits: dict) -> list[str]:
    from linscale_jax.fit import paper

    L = ["## Comparisons (computed)", ""]
    c, law = found.get("common_compute") or {}, found.get("law_at_common_compute") or {}
    if c.get("runner_up"):
        def res(x):
            return ("resolved (the 95% interval of the difference excludes 0)" if x.get("resolved") else
                    "**not resolved** (the 95% interval of the difference includes 0)")
        L.append(f"**Lowest loss at the largest common compute C = {c['compute']:.3g} PF-days** (the largest "
                 f"compute every arch reaches with >= 2 sizes), measured on the envelopes: **{c['best']}** "
                 f"(share of draws where it is lowest: {c.get('p_best') or 0:.2f}); {c['runner_up']} is "
                 f"{_ci(c['diff'], 3)} nats higher: {res(c)}.")
        L.append(f"By the fitted L(C) laws at the same C: **{law['best']}** (share of draws: "
                 f"{law.get('p_best') or 0:.2f}); {law['runner_up']} is {_ci(law['diff'], 3)} higher: {res(law)}.")
        L += ["", "| arch | envelope loss at that C [95%] | fitted L(C) at that C [95%] |", "|---|---|---|"]
        L += [f"| {a} | {_ci(v)} | {_ci(law['by_arch'][a]) if a in law.get('by_arch', {}) else 'not fitted'} |"
              for a, v in sorted(c["by_arch"].items(), key=lambda kv: kv[1][0])]
        failed = max(list((c.get("failed") or {}).values()) + list((law.get("failed") or {}).values()) + [0.0])
        L += ["", "Both columns come from the paired draws of finding 2 (sizes fixed, checkpoint residuals "
              "shared between archs, seed offsets with the drawn seed sd), so they cover a re-run with other "
              f"seeds; failed draws: at most {failed:.0%} per arch. A difference whose interval includes 0 is "
              "reported as not resolved."]
    L += ["", "**Exponents side by side** (ours [95%] / paper):", "",
          "| arch | L(C) | N_opt(C) | D_opt(C) |", "|---|---|---|---|"]
    for a, e in fits.items():
        cells = []
        for key, _ in LAWS:
            ci = (e[key].get("ci95") or {}).get("exponent") or [None, None]
            p = paper.TABLE3.get(a, {}).get(key)
            cells.append(f"{_ci([e[key]['exponent'], *ci])} / {p.exponent if p else 'n/a'}")
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    pr = found.get("probes") or {}
    if "niah" in pr:
        L += ["", "**Retrieval, NIAH** (largest model of each arch; mean cell accuracy [95%, cells "
              "bootstrapped]):", ""]
        L += [f"- {a}: {_ci(v, 3)}" for a, v in pr["niah"]["by_arch"].items()]
        L += [f"- {k}: {_ci(v, 3)}" for k, v in pr["niah"]["diffs"].items()]
    if "probe" in pr:
        L += ["", "**Line probe** (pick the true next line among 4; chance 0.25; largest model of each arch, "
              "lm-eval acc [95%, normal approximation]):", ""]
        L += [f"- {a}: {_ci(v, 3)}" for a, v in pr["probe"]["by_arch"].items()]
        L += [f"- {k}: {_ci(v, 3)}" for k, v in pr["probe"]["diffs"].items()]
    return L + [""]


def _calibration_section(workdir: str) -> list[str]:
    cal = _read(contract.study_path(workdir, contract.CALIBRATION_JSON))
    if not cal:
        return []
    L = ["## Calibration of the verdicts on this study's design", "",
         "`python -m linscale_jax.study --config=calibrate` simulates studies with this study's sizes, checkpoints, tokens, "
         "replicates and estimators: each arch's loss from the baseline's fitted L(N, D) (changed per case), "
         "its own within-run residuals around its law as an AR(1) with their sd and lag-1 autocorrelation, and "
         "seed effects at 1× and 3× its measured sd, as offsets and as slope changes (a quarter of the studies "
         "each); the same verdict code judges them. Shares of finding-2 verdicts over every linear arch and "
         "estimator; the resolved share per seed-effect scenario is the false one in the nulls and the "
         "correct one with an effect.", ""]
    for d in cal["designs"]:
        L += [f"**{d['design']}** ({d['runs']} runs, {d['cost']['text']}; `{d['command']}`, "
              f"{d['seconds']:.0f} s, {d['seeds']} studies per case):", "",
              "| case | better | worse | equivalent | not_resolved | target | "
              + " | ".join(d["scenarios"]) + " |", "|---|---|---|---|---|---|" + "---|" * len(d["scenarios"])]
        for x in d["cases"]:
            L.append(f"| {x['case']} | {x['better']:.0%} | {x['worse']:.0%} | {x['equivalent']:.0%} | "
                     f"{x['not_resolved']:.0%} | {x['target']} | "
                     + " | ".join(f"{x['by_scenario'][s]['resolved']:.0%}" for s in d["scenarios"]) + " |")
        L += ["", d["summary"], ""]
    return L


def _niah_section(runs: list[dict]) -> list[str]:
    L = ["## NIAH heatmaps (largest model of each arch, final checkpoint)", ""]
    largest = {}
    for r in runs:
        if not r["seed"] and r["n_params"] >= largest.get(r["arch"], {}).get("n_params", 0):
            largest[r["arch"]] = r
    for r in largest.values():
        if r.get("niah_heatmap"):
            L += [f"**{r['name']}** ({r['niah_task']}, weighted acc {r['niah_weighted_acc']:.3f}, "
                  f"NIAH score {r['niah_score']:.3f}): ![{r['name']}]({r['niah_heatmap']})", ""]
    return L


def _runs_table(runs: list[dict]) -> list[str]:
    def f(x):
        return "—" if x is None else f"{x:.4g}"

    L = ["## Runs", "", "| run | N (non-emb) | N paper (Table 1) | N with embedding + head | steps | tokens | "
         "C (PF-days) | final val_loss | line probe acc | NIAH weighted acc |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        L.append(f"| {r['name']} | {r['n_params']:.3g} | {f(r.get('paper'))} | {f(r.get('total'))} | {r['steps']} | "
                 f"{r['tokens']:.3g} | {r['pf_days']:.3g} | {f(r['val_loss'])} | {f(r['probe_acc'])} | "
                 f"{f(r['niah_weighted_acc'])} |")
    return L + [""]


def _wall_section(runs: list[dict], wall: dict | None) -> list[str]:
    """Where the time went: per-run sums of compile, train and eval (process seconds, all
    invocations), and the last invocation's wall time of the runs phase and of the fits."""
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


def write_report(workdir: str) -> str:
    """DIR/report.md and its plots from the study's data files (module docstring)."""
    from linscale_jax.fit import holdout as fit_holdout
    from linscale_jax.fit import paper
    from linscale_jax.fit.table import load

    found = _read(contract.study_path(workdir, contract.FINDINGS_JSON))
    if found is None:
        raise FileNotFoundError(f"{workdir} has no {contract.FINDINGS_JSON}; run `python -m linscale_jax.study --config=... "
                                f"--workdir={workdir} --join_only` first")
    fits = _read(contract.study_path(workdir, contract.STUDY_FIT, contract.FITS_JSON)) or {}
    rep_dir = contract.study_path(workdir, contract.REPORT_DIR)
    os.makedirs(rep_dir, exist_ok=True)
    table = load(contract.study_path(workdir, contract.STUDY_FIT, contract.STUDY_TABLE)).with_compute_unit("pf-days")
    plot_loss_vs_compute(table, contract.study_path(workdir, contract.STUDY_FIT, contract.ENVELOPE_CSV), fits,
                         os.path.join(rep_dir, "loss_vs_compute.png"))
    curves = contract.study_path(workdir, contract.HOLDOUT_CURVES_CSV)
    if os.path.exists(curves) and os.path.getsize(curves) > 80:
        fit_holdout.plot(curves, table, os.path.join(rep_dir, "holdout.png"), "C (PF-days)")
    d, runs = found["design"], found["runs"]
    L = [f"# Miniature scaling study ({d['runs']} runs: {','.join(d['archs'])} × {','.join(d['sizes'])})", "",
         f"Fit: approach {d['approach']}, C in PF-days (Table-1 accounting), 95% intervals of the fitted laws "
         f"from {d['bootstrap']} bootstrap resamples of whole runs"
         f"{' (clamped envelope points kept)' if d['include_clamped'] else ''}; the verdicts' and comparisons' "
         f"intervals from {found['n_boot']} paired draws with the sizes fixed (section 'The paper's findings'). "
         f"Laws, envelopes and comparisons use the checkpoints from step {d['fit_min_step']} on (the end of the "
         "learning-rate warmup); table.csv keeps every checkpoint.", ""]
    L += _scale_section(d, runs)
    L += ["## Loss vs compute", "", "![loss vs compute](report/loss_vs_compute.png)", "",
          "Per-arch panels from fit/: ![curves](fit/curves.png)", ""]
    L += ["## Compute-optimal allocation N_opt(C), D_opt(C)", "", "![allocation](fit/allocation.png)", "",
          "| arch | N_opt(C) ours | D_opt(C) ours |", "|---|---|---|"]
    L += [f"| {a} | {_law(e['N_opt_C'])} | {_law(e['D_opt_C'])} |" for a, e in fits.items()]
    L += _bracketing_section(found)
    L += ["", "## Fitted laws beside the paper's Table 3", "",
          "| arch | law | ours (95% interval) | paper Table 3 |", "|---|---|---|---|"]
    for a, e in fits.items():
        for key, label in LAWS:
            p = paper.TABLE3.get(a, {}).get(key)
            L.append(f"| {a} | {label} | {_law(e[key])} | {p if p is not None else 'n/a'} |")
    for a, err in (found.get("fit_errors") or {}).items():
        L.append(f"\n**Not fitted: {a}** — {err}")
    L += ["", "![ours vs paper](fit/paper_overlay.png)", ""]
    L += _noise_section(found)
    L += scaling_laws.report_section(found)
    L += holdout.report_section(workdir)
    L += findings.section(found)[0]
    L += _comparisons(found, fits)
    L += _calibration_section(workdir)
    L += _niah_section(runs)
    L += _runs_table(runs)
    L += _wall_section(runs, found.get("wall"))
    path = contract.study_path(workdir, contract.REPORT_MD)
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    return path
