"""DIR/report.md of a study: plots, fitted laws beside the paper's Table 3, NIAH, comparisons.

    write_report(study, runs, workdir, approach, fit_errors) -> path of report.md
Reads DIR/fit/table.csv (the checkpoints the laws use), DIR/fit/fits.json (+ its PNGs),
DIR/holdout.json (study.holdout) and each run's eval/results.jsonl; writes DIR/report.md and DIR/report/loss_vs_compute.png (every arch's
curves, envelope and fitted L(C)).
"""

from __future__ import annotations

import json
import os

import numpy as np

from linscale_jax import contract
from study import compare, findings, holdout, plan

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


def plot_loss_vs_compute(table, fits: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fit import approach1

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, arch in enumerate(table.archs):
        col = plt.get_cmap("tab10")(i)
        sub = table.select(arch)
        for _, r in sub.runs():
            ax.plot(r.flops, r.loss, color=col, lw=0.6, alpha=0.35)
        try:
            env = approach1.envelope(sub)
            ax.plot(env.compute, env.loss, color=col, lw=2, label=f"{arch} envelope")
        except Exception:  # noqa: BLE001  (fewer than 3 runs: no envelope, curves only)
            pass
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


def _final_rows(run) -> dict:
    from eval.runner import read_results

    rows = read_results(run.workdir) if os.path.exists(run.workdir) else []
    last = max((r["step"] for r in rows), default=None)
    return {r["task"]: r for r in rows if r["step"] == last}


def _scale_section(runs) -> list[str]:
    from linscale_jax.models.sizes import PAPER_CONTEXT, PAPER_VOCAB

    ns = [r.n_params for r in runs]
    c = runs[0].config
    return [
        "## Scale difference from the paper",
        f"- Parameters (non-embedding): {min(ns):.3g} .. {max(ns):.3g} "
        f"({np.log10(max(ns) / min(ns)):.2f} decades) here vs 7e7 .. 7e9 in the paper (~1e3-1e4x smaller).",
        f"- Tokens per run: {runs[0].tokens:.3g} here vs 3e11 in the paper ({3e11 / runs[0].tokens:.2g}x fewer); "
        f"compute per run {min(r.pf_days for r in runs):.3g} .. {max(r.pf_days for r in runs):.3g} PF-days "
        "vs ~0.2 .. 200 PF-days.",
        f"- Data: `{c.data.task}` (vocabulary `{c.data.vocab}`, {c.model.vocab_size} ids) vs the paper's private "
        f"2T-token English/Chinese corpus with cl100k_base ({PAPER_VOCAB} ids); losses are per token of "
        "different vocabularies and are not comparable in absolute value.",
        f"- Context {c.train.seq_len} tokens, batch {_spread(runs, lambda r: r.config.train.batch_size)} sequences, "
        f"{_spread(runs, lambda r: r.steps)} steps vs {PAPER_CONTEXT} tokens, 480 sequences, 76k steps.",
        (f"- Optimiser: AdamW, peak lr {c.optim.lr:g}, `{c.optim.schedule}` schedule after {c.optim.warmup_steps} "
         "warmup steps, the same for every size, vs the paper's lr 3e-4 with one fixed schedule."
         if str(c.optim.get("rule", "paper")) == "paper" else
         f"- Optimiser: AdamW, `{c.optim.schedule}` schedule, peak lr {_spread(runs, lambda r: r.config.optim.lr)}, "
         f"β2 {_spread(runs, lambda r: r.config.optim.b2)}, warmup {_spread(runs, lambda r: r.config.optim.warmup_steps)} "
         f"steps per arch and size from the learning-rate rule `optim.rule={c.optim.rule}` (linscale_jax.train.rule), "
         "vs the paper's one lr 3e-4 for every size with one fixed schedule.")
        + (" A constant rate keeps every checkpoint on an equal footing for the envelope (a decaying schedule "
           "flatters the ends of short runs against the middles of long ones)." if c.optim.schedule == "constant"
           else ""),
        "- Consequently the fitted coefficients describe this miniature regime only; compare exponents' "
        "signs and orderings, not values, with Table 3.", ""]


def _spread(runs, value) -> str:
    """'8' when every run has the same value, else 'lo..hi' over the runs."""
    vals = sorted({value(r) for r in runs})
    return f"{vals[0]:g}" if len(vals) == 1 else f"{vals[0]:g}..{vals[-1]:g}"


def _envelope_section(table, include_clamped: bool) -> list[str]:
    """Where each arch's envelope is an optimum (an interior size wins) and where it is a bound."""
    from fit import approach1

    L = ["", "### How well the envelope brackets the optimum", "",
         "Share of the log-compute grid (256 points between each arch's first and last checkpoint) where "
         "the lowest loss comes from an interior size (a real optimum), from the smallest or the largest "
         "size reaching that compute (a bound: the optimum may lie outside the trained sizes), or where only "
         "one size reaches it.", "", "| arch | interior | smallest wins | largest wins | one size |",
         "|---|---|---|---|---|"]
    clamped_share = []
    for a in table.archs:
        try:
            k = approach1.envelope(table.select(a)).clamped
        except Exception as e:  # noqa: BLE001  (too few runs: say so, keep the report)
            L.append(f"| {a} | {e} | | | |")
            continue
        shares = [float(np.mean(k == v)) for v in (0, -1, 1, 2)]
        clamped_share.append(shares[1])
        L.append(f"| {a} | " + " | ".join(f"{x:.0%}" for x in shares) + " |")
    if clamped_share and max(clamped_share) > 0.5:
        L += ["", "At most computes the smallest size that reaches them has the lowest loss: every run here is "
              "still data-limited (loss keeps falling with tokens faster than it falls with parameters), so "
              "more tokens beat more parameters at every budget this study reaches. "
              + ("The N_opt(C) and D_opt(C) laws below are fitted to the whole envelope (as the paper does), "
                 "so they trace where the runs end: read them as bounds, not as measured optima. "
                 if include_clamped else "")
              + "Bracketing the optimum needs runs long enough for the smallest models to saturate "
              "(the paper trains its smallest model on ~4,000 tokens per parameter)."]
    return L


def write_report(study, runs, workdir: str, approach: int, fit_errors: dict | None = None,
                 wall: dict | None = None) -> str:
    """DIR/report.md; `wall` ({runs_s, workers, fit_s}: this invocation's runs phase and the fits
    so far) adds the wall-time section."""
    from fit import paper
    from fit.table import load

    rep_dir = contract.study_path(workdir, contract.REPORT_DIR)
    os.makedirs(rep_dir, exist_ok=True)
    table = load(contract.study_path(workdir, contract.STUDY_FIT, contract.STUDY_TABLE)).with_compute_unit("pf-days")
    fits_path = contract.study_path(workdir, contract.STUDY_FIT, contract.FITS_JSON)
    fits = json.load(open(fits_path)) if os.path.exists(fits_path) else {}
    plot_loss_vs_compute(table, fits, os.path.join(rep_dir, "loss_vs_compute.png"))
    n_boot = max(int(study.fit.bootstrap), 20)
    L = [f"# Miniature scaling study ({len(runs)} runs: {study.archs} × {study.sizes})", "",
         f"Fit: approach {approach}, C in PF-days (Table-1 accounting), 95% intervals from "
         f"{int(study.fit.bootstrap)} bootstrap resamples of whole runs"
         f"{' (clamped envelope points kept)' if study.fit.include_clamped else ''}. "
         f"Laws, envelopes and comparisons use the checkpoints from step {plan.fit_min_step(runs)} on (the end of the "
         "learning-rate warmup); table.csv keeps every checkpoint.", ""]
    L += _scale_section(runs)
    L += ["## Loss vs compute", "", "![loss vs compute](report/loss_vs_compute.png)", "",
          "Per-arch panels from fit/: ![curves](fit/curves.png)", ""]
    L += ["## Compute-optimal allocation N_opt(C), D_opt(C)", "", "![allocation](fit/allocation.png)", "",
          "| arch | N_opt(C) ours | D_opt(C) ours |", "|---|---|---|"]
    L += [f"| {a} | {_law(e['N_opt_C'])} | {_law(e['D_opt_C'])} |" for a, e in fits.items()]
    L += _envelope_section(table, bool(study.fit.include_clamped))
    L += ["", "## Fitted laws beside the paper's Table 3", "",
          "| arch | law | ours (95% interval) | paper Table 3 |", "|---|---|---|---|"]
    for a, e in fits.items():
        for key, label in LAWS:
            p = paper.TABLE3.get(a, {}).get(key)
            L.append(f"| {a} | {label} | {_law(e[key])} | {p if p is not None else 'n/a'} |")
    for a, err in (fit_errors or {}).items():
        L.append(f"\n**Not fitted: {a}** — {err}")
    L += ["", "![ours vs paper](fit/paper_overlay.png)", ""]
    result = judge(study, runs, workdir)
    L += _noise_section(table, result)
    L += holdout.report_section(workdir)
    lines, common, law = _comparisons(runs, table, fits, n_boot, int(study.fit.seed),
                                      bool(study.fit.include_clamped), seed_noise(result))
    found, verdicts = findings.section(result)
    L += found + lines
    summary = dict(findings=result["findings"], estimators=result["estimators"], margin=result["margin"],
                   tolerance=result["tolerance"], by_estimator=result["by_estimator"],
                   common_compute=_plain(common), law_at_common_compute=_plain(law),
                   checkpoint_sd=compare.checkpoint_sd(table))
    with open(contract.study_path(workdir, contract.FINDINGS_JSON), "w") as f:
        json.dump(_plain(summary), f, indent=2)
    L += _niah_section(runs, workdir)
    L += _runs_table(runs)
    L += _wall_section(runs, wall)
    path = contract.study_path(workdir, contract.REPORT_MD)
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    return path


def _largest(runs) -> dict:
    out = {}
    for r in runs:
        if r.seed:
            continue
        if r.arch not in out or r.n_params > out[r.arch].n_params:
            out[r.arch] = r
    return out


def judge(study, runs, workdir: str) -> dict:
    """study.verdicts.judge_all on the study's estimator tables (DIR/fit/table*.csv), with the
    preset's margin, tolerance, bootstrap and fallback seed sd, and the recall study's rows."""
    from study import verdicts

    names = plan.estimators(study)
    specs = [f"{n}={contract.study_path(workdir, contract.STUDY_FIT, contract.fit_table_name(n, i == 0))}"
             for i, n in enumerate(names)]
    specs = [x for x in specs if os.path.exists(x.split("=", 1)[1])]
    v = study.get("verdicts", {})
    recall_rows, recall_src = findings.recall_rows_from(study)
    return verdicts.judge_all(verdicts.load_tables(specs), recall_rows, recall_src,
                              margin=float(v.get("margin", verdicts.DEFAULT_MARGIN)),
                              tolerance=float(v.get("tolerance", verdicts.DEFAULT_TOLERANCE)),
                              seed_sd=float(study.get("noise", {}).get("seed_sd", 0.0)) or None,
                              n_boot=max(int(study.fit.bootstrap), 20), seed=int(study.fit.seed))


def seed_noise(result: dict) -> dict:
    """{arch: seed-to-seed sd} of the laws' estimator (the first), as study.verdicts measured it."""
    first = result["estimators"][0]
    return {a: float(v["sd"]) for a, v in result["by_estimator"][first]["seed_sd"].items()
            if np.isfinite(v["sd"])}


def _noise_section(table, result: dict) -> list[str]:
    """Seed-to-seed sd per arch and estimator (from the replicate runs), and each run's smoothness."""
    est = result["estimators"]
    L = ["## Noise", "", "Seed-to-seed sd of one run's loss (nats): sd over the replicate seeds of a size of each "
         "replicate's mean over its second half of checkpoints, pooled over the arch's replicated sizes "
         "(study.replicates); the verdicts' intervals give every run a normal offset of this sd. "
         "Where an arch has no replicates, the preset's noise.seed_sd is assumed (said so).", "",
         "| arch | " + " | ".join(est) + " |", "|---|" + "---|" * len(est)]
    for a in table.archs:
        cells = []
        for n in est:
            s = result["by_estimator"][n]["seed_sd"].get(a)
            cells.append("—" if s is None else f"{s['sd']:.4f} ({s['source']})")
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    L += ["", "Smoothness of the laws' curves (not a noise sd: neighbouring checkpoints are correlated, and "
          "for val_loss_avg they share weights): RMS residual of the second half of every run around its "
          "quadratic trend in ln C, and the share of successive checkpoints whose loss rises.", "",
          "| arch | residual around the trend (nats) | rising share |", "|---|---|---|"]
    for a, v in compare.checkpoint_sd(table).items():
        L.append(f"| {a} | " + (f"{v['sd']:.4f} | {v['rise']:.0%}" if np.isfinite(v["sd"]) else
                                "— (too few checkpoints) | —") + " |")
    return L + [""]


def _verdict(c: dict) -> str:
    if c.get("resolved"):
        return "resolved (the 95% interval of the difference excludes 0)"
    return "**not resolved** (the 95% interval of the difference includes 0)"


def _comparisons(runs, table, fits, n_boot: int, seed: int, include_clamped: bool,
                 noise: dict | None = None) -> list[str]:
    """The comparisons section, and the envelope and law comparisons at the common compute (None
    with a single arch)."""
    L = ["## Comparisons (computed)", ""]
    c = law = None
    if len(table.archs) >= 2:
        c = compare.loss_at_common_compute(table, n_boot, seed, noise)
        L.append(f"**Lowest loss at the largest common compute C = {c['compute']:.3g} PF-days** (the largest "
                 "compute every arch reaches with >= 2 runs): **" + c["best"] + "** "
                 f"(bootstrap share of resamples where it is lowest: {c.get('p_best', float('nan')):.2f}); "
                 f"{c['runner_up']} is {_ci(c['diff'])} nats higher: {_verdict(c)}.")
        law = compare.law_at_common_compute(table, include_clamped, n_boot, seed, noise)
        if law.get("runner_up"):
            L.append(f"By the fitted L(C) laws at the same C: **{law['best']}** (share of resamples: "
                     f"{law.get('p_best', float('nan')):.2f}); {law['runner_up']} is {_ci(law['diff'])} higher: "
                     f"{_verdict(law)}.")
        L += ["", "| arch | envelope loss at that C [95%] | fitted L(C) at that C [95%] |", "|---|---|---|"]
        L += [f"| {a} | {_ci(v)} | {_ci(law['by_arch'][a]) if a in law['by_arch'] else 'not fitted'} |"
              for a, v in sorted(c["by_arch"].items(), key=lambda kv: kv[1][0])]
        L += ["", "Both intervals resample whole runs and add, per draw, a normal error with the sd of one loss "
              "point (the arch's seed-to-seed sd; see 'Noise'), so they cover a re-run with another seed. "
              "The law column refits L(C) on every "
              "resample. A difference whose interval includes 0 is reported as not resolved."]
    L += ["", "**Exponents side by side** (ours [95%] / paper):", "",
          "| arch | L(C) | N_opt(C) | D_opt(C) |", "|---|---|---|---|"]
    from fit import paper

    for a, e in fits.items():
        cells = []
        for key, _ in LAWS:
            ci = (e[key].get("ci95") or {}).get("exponent") or [np.nan, np.nan]
            p = paper.TABLE3.get(a, {}).get(key)
            cells.append(f"{_ci([e[key]['exponent'], *ci])} / {p.exponent if p else 'n/a'}")
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    # retrieval: NIAH cells and the line probe of each arch's largest model
    cells, acc, n_items = {}, {}, {}
    for a, r in _largest(runs).items():
        fr = _final_rows(r)
        for task, row in fr.items():
            if task.startswith("niah") and row.get("niah_heatmap"):
                js = os.path.splitext(row["niah_heatmap"])[0] + ".json"
                if os.path.exists(js):
                    s = np.asarray(json.load(open(js))["scores"], float)
                    cells[a] = ((s - 1.0) / 9.0).ravel()
            if task == "probe":
                acc[a], n_items[a] = float(row["probe_acc"]), int(row["probe_items"])
    if cells:
        per, diffs = compare.niah_comparison(cells, seed=seed)
        L += ["", "**Retrieval, NIAH** (largest model of each arch; mean cell accuracy [95%, cells "
              "bootstrapped]):", ""]
        L += [f"- {a}: {_ci(v, 3)}" for a, v in per.items()]
        L += [f"- {k}: {_ci(v, 3)}" for k, v in diffs.items()]
    if acc:
        per, diffs = compare.probe_comparison(acc, n_items)
        L += ["", "**Line probe** (pick the true next line among 4; chance 0.25; largest model of each arch, "
              "lm-eval acc [95%, normal approximation]):", ""]
        L += [f"- {a}: {_ci(v, 3)}" for a, v in per.items()]
        L += [f"- {k}: {_ci(v, 3)}" for k, v in diffs.items()]
    return L + [""], c, law


def _niah_section(runs, workdir: str) -> list[str]:
    L = ["## NIAH heatmaps (largest model of each arch, final checkpoint)", ""]
    for a, r in _largest(runs).items():
        for task, row in _final_rows(r).items():
            if task.startswith("niah") and row.get("niah_heatmap"):
                rel = os.path.relpath(row["niah_heatmap"], workdir)
                L.append(f"**{r.name}** ({task}, weighted acc {row['niah_weighted_acc']:.3f}, "
                         f"NIAH score {row['niah_score']:.3f}): ![{r.name}]({rel})")
                L.append("")
    return L


def _runs_table(runs) -> list[str]:
    L = ["## Runs", "", "| run | N (non-emb) | steps | tokens | C (PF-days) | final val_loss | line probe acc | "
         "NIAH weighted acc |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        fr = _final_rows(r)
        vl = fr.get("val_loss", {}).get("val_loss")
        pa = fr.get("probe", {}).get("probe_acc")
        na = next((row.get("niah_weighted_acc") for t, row in fr.items() if t.startswith("niah")), None)
        f = (lambda x: "—" if x is None else f"{x:.4g}")  # noqa: E731
        L.append(f"| {r.name} | {r.n_params:.3g} | {r.steps} | {r.tokens:.3g} | {r.pf_days:.3g} | {f(vl)} | "
                 f"{f(pa)} | {f(na)} |")
    return L + [""]


def _plain(x):
    """JSON-ready copy of a comparison dict (numpy scalars to floats)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    return x


def _timing(run) -> dict:
    """The sums over a run's invocations in <run>/timing.jsonl (train, eval and their compile)."""
    path = os.path.join(run.workdir, contract.TIMING)
    keys = ("train_s", "train_compile_s", "eval_s", "eval_compile_s", "cooldown_s", "cooldown_compile_s")
    tot = dict.fromkeys(keys, 0.0)
    if os.path.exists(path):
        for line in open(path):
            row = json.loads(line)
            for k in keys:
                tot[k] += float(row.get(k, 0.0))
    return tot


def _wall_section(runs, wall: dict | None) -> list[str]:
    """Where the time went: per-run sums of compile, train and eval (process seconds, all
    invocations), and this invocation's wall time of the runs phase and of the fits."""
    per = {r.name: _timing(r) for r in runs}
    tot = {k: sum(t[k] for t in per.values()) for k in ("train_s", "train_compile_s", "eval_s",
                                                       "eval_compile_s", "cooldown_s", "cooldown_compile_s")}
    L = ["## Wall time", ""]
    if wall is not None:
        L += [f"This invocation: runs phase {wall['runs_s'] / 60:.1f} min on {wall['workers']} "
              f"worker process(es), join + fits + report {wall['fit_s'] / 60:.1f} min (before this "
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
