"""The tuning grid's outputs (study.tune): DIR/tune/cells.csv and cells.md, rule.json (the fitted
rules with intervals, provenance and every cell's loss: the file linscale_jax.train.rule reads),
lr.png and summary.md.

    joined = join(study, workdir, {cell: (loss, val_loss)})   # cells.csv, rule.json
    report(study, joined)                                      # cells.md, lr.png
"""

from __future__ import annotations

import copy
import csv
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from linscale_jax import contract
from linscale_jax.study import files
from linscale_jax.study.tune import fit as tune_fit
from linscale_jax.study.tune.check import TuneConfigError
from linscale_jax.study.tune.fit import Cell, lr_of
from linscale_jax.study.tune.grid import (beta2_of, cell_name, data_of, n_params_of, names, reference, rule_from,
                                          rule_of)

def _print(msg: str) -> None:
    print(msg, flush=True)


def machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.machine()} {model}, {os.cpu_count()} cores, {platform.system()}".strip()


def code_version() -> str:
    try:
        return subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[3]), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cell_rows(study, seen: dict) -> list[dict]:
    """One row per cell; best = the lowest seed-0 loss of its (arch, size)."""
    t = study.tune
    best = {}
    for c, (cool, _) in seen.items():
        key = (c.arch, c.size)
        if c.seed == 0 and np.isfinite(cool) and (key not in best or cool < seen[best[key]][0]):
            best[key] = c
    rows = []
    for c in sorted(seen, key=lambda c: (c.arch, n_params_of(study, c.arch, c.size), c.batch, c.beta2, c.k, c.seed)):
        cool, val = seen[c]
        rows.append(dict(arch=c.arch, size=c.size, n_params=int(n_params_of(study, c.arch, c.size)),
                         lr=lr_of(c.k, float(t.lr_base)), batch=c.batch, beta2=c.beta2, seed=c.seed,
                         loss=round(cool, 4) if np.isfinite(cool) else "diverged",
                         val_loss=round(val, 4) if np.isfinite(val) else "diverged",
                         best=int(best.get((c.arch, c.size)) == c)))
    return rows


def _fmt_ci(ci, fmt="{:.3g}") -> str:
    return "" if ci is None else "[" + ", ".join(fmt.format(x) for x in ci) + "]"


def join(study, workdir: str, seen: dict) -> dict:
    """DIR/tune/cells.csv and rule.json from the measured cells {cell: (loss, val_loss)}: the fitted
    rules (the file linscale_jax.train.rule reads) and one row per cell."""
    out_dir = files.study_path(workdir, files.TUNE_DIR)
    os.makedirs(out_dir, exist_ok=True)
    loss = {c: v[0] for c, v in seen.items()}
    fitted = rule_of(study, loss)
    sigma, pairs = tune_fit.seed_sd(loss)
    rows = cell_rows(study, seen)
    with open(os.path.join(out_dir, "cells.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rule = rule_file(study, loss, fitted, sigma, pairs, rows)
    with open(os.path.join(out_dir, "rule.json"), "w") as f:
        json.dump(rule, f, indent=1)
    return {"rule": rule, "rows": rows, "fitted": fitted, "dir": out_dir}


def report(study, joined: dict, log=_print) -> str:
    """DIR/tune/cells.md (the table) and lr.png; returns cells.md's path."""
    from linscale_jax.study.tune import plot as tune_plot

    out_dir = joined["dir"]
    png = tune_plot.plot_lr(joined["rows"], joined["fitted"], os.path.join(out_dir, "lr.png"))
    md = summary_md(study, joined["rule"], joined["rows"])
    path = os.path.join(out_dir, "cells.md")
    with open(path, "w") as f:
        f.write(md)
    log(md)
    log(f"[tune] wrote {out_dir}/cells.csv, cells.md, rule.json, {os.path.basename(png)}; ship the rule "
        f"with: cp {out_dir}/rule.json linscale_jax/train/tuned_rule.json")
    return path


def _law_json(law: dict) -> dict:
    return {k: law[k] for k in ("coefficient", "exponent", "coefficient_ci", "exponent_ci")}


def _sizes_json(f: dict, lr_base: float) -> dict:
    out = {}
    for i, s in enumerate(f["sizes"]):
        o = f["optima"][s]
        out[s] = {"n_params": f["n"][i], "lr_opt": f["lr"]["values"][i], "batch_opt": f["batch"]["values"][i],
                  "lr_opt_ci": f["lr"]["values_ci"][i] if f["lr"]["values_ci"] else None,
                  "batch_opt_ci": f["batch"]["values_ci"][i] if f["batch"]["values_ci"] else None,
                  "lr_edge": o.lr_edge, "batch_edge": o.batch_edge, "best": cell_name(o.best, lr_base),
                  "loss": o.loss}
    return out


def provenance() -> dict:
    return {"command": "python -m linscale_jax.study " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "machine": machine(), "code": code_version()}


def rule_file(study, loss: dict, fitted: dict, sigma: float, pairs: int, rows: list[dict]) -> dict:
    """The rule file (linscale_jax.train.rule): laws per arch, range, data, provenance, cells. With
    tune.rule_from, that file with each checked arch's entry (its check and the check's provenance)
    added or replaced and this grid's cells appended. A check at another token budget than the
    file's (a horizon check: does the rule's rate still win when runs train longer or shorter?)
    keeps the laws and adds the checks under `horizon_checks`, and the exponent they measure under
    `horizon` (horizon_file)."""
    t = study.tune
    given = rule_from(study)
    if given is not None and float(study.tokens) != float(given["data"]["tokens"]):
        return horizon_file(study, given, loss, rows)
    ref_arch, lr_law, batch_law, beta2 = reference(study, loss)
    archs = {arch: {"lr": _law_json(f["lr"]), "batch": _law_json(f["batch"]), "beta2": beta2_of(f),
                    "sizes": _sizes_json(f, float(t.lr_base))} for arch, f in fitted.items()}
    if given is not None:
        archs = {**copy.deepcopy(given["archs"]), **archs}
    for arch, ch in check_summary(study, loss, lr_law).items():
        if arch in fitted:
            continue
        if given is not None:
            ch["provenance"] = provenance()
        if arch == ref_arch:  # the rule's own arch at other sizes: its laws stay, the check says if they hold
            archs[arch] = {**archs[arch], "check": ch}
            if not ch["own_rule"]:
                ns = [archs[arch]["range"][k] for k in ("n_min", "n_max")] + [v["n_params"] for v in ch["sizes"].values()]
                archs[arch]["range"] = {"n_min": min(ns), "n_max": max(ns)}
            continue
        if ch["own_rule"]:  # a law through its checked sizes; the reference's batch and β2
            if len(ch["sizes"]) < 2:
                (s, v), = ch["sizes"].items()
                raise TuneConfigError(
                    f"{arch}'s best rate at {s} is {v['ratio']:.2f}x the rule's, beyond tune.own_rule_factor="
                    f"{float(t.own_rule_factor):g}, so {arch} needs its own rule: a law through at least 2 checked "
                    f"sizes, and tune.check_sizes={t.check_sizes!r} gives 1; add a size and run again (the "
                    "cells trained so far are kept)")
            own = tune_fit.fit_power_law([v["n_params"] for v in ch["sizes"].values()],
                                         [v["lr_opt"] for v in ch["sizes"].values()], what=f"{arch} lr rule")
            archs[arch] = {"lr": {"coefficient": own.coefficient, "exponent": own.exponent,
                                  "coefficient_ci": None, "exponent_ci": None},
                           "batch": _law_json(batch_law), "beta2": beta2, "check": ch}
        else:
            earlier = (given or {}).get("archs", {}).get(arch, {})
            archs[arch] = {"same_as": ref_arch, "check": ch}
            if "same_as" in earlier and "range" in earlier:  # it shared the rule before: that range stands
                archs[arch]["range"] = dict(earlier["range"])
        ns = [v["n_params"] for v in ch["sizes"].values()] + list(archs[arch].get("range", {}).values())
        archs[arch]["range"] = {"n_min": min(ns), "n_max": max(ns)}  # the sizes it was checked at, and before
    for arch, f in fitted.items():  # the sizes each arch was tuned at
        archs[arch]["range"] = {"n_min": min(f["n"]), "n_max": max(f["n"])}
    ns = [n for entry in archs.values() for n in entry["range"].values()]
    if given is not None:
        return {**given, "range": {**given["range"], "n_min": min(ns), "n_max": max(ns)}, "archs": archs,
                "cells": [r for r in given.get("cells", []) if (r["arch"], r["size"]) not in
                          {(x["arch"], x["size"]) for x in rows}] + rows}
    return {
        "what": ("AdamW peak learning rate, batch (sequences) and beta2 per arch and size, tuned on a "
                 "grid at a fixed token budget and selected by the loss under the cooldown estimator; "
                 "lr = coefficient * N^exponent, batch likewise rounded to a power of two, "
                 "warmup = warmup_tokens_per_param * N tokens, N non-embedding parameters"),
        **provenance(),
        "data": data_of(study),
        "range": {"n_min": min(ns), "n_max": max(ns), "n_count": "non_embedding"},
        "warmup_tokens_per_param": float(t.warmup_tokens_per_param),
        "default": ref_arch,
        "seed_sd": {"value": sigma, "pairs": pairs},
        "archs": archs,
        "cells": rows,
    }


def horizon_file(study, given: dict, loss: dict, rows: list[dict]) -> dict:
    """tune.rule_from's file with its laws unchanged and `horizon_checks`: per checked arch at this
    grid's token budget, the budget, its factor over the file's, the sizes' best rates against the
    rule's N law and the cells (an earlier check of the same arch at the same budget is replaced);
    and, where the file holds the same sizes' best rates at its own budget (horizon_pairs), `horizon`:
    {tokens: the file's budget, exponent: the pairs' mean g, pairs}, which linscale_jax.train.rule
    applies to every run's rate, lr·(D/D0)^-g."""
    _, lr_law, _, _ = reference(study, loss)
    tokens = float(study.tokens)
    new = [dict(arch=arch, tokens=tokens, factor=tokens / float(given["data"]["tokens"]), sizes=ch["sizes"],
                cells=[r for r in rows if r["arch"] == arch], **provenance())
           for arch, ch in check_summary(study, loss, lr_law).items()]
    done = {(h["arch"], h["tokens"]) for h in new}
    checks = [h for h in given.get("horizon_checks", []) if (h["arch"], float(h["tokens"])) not in done] + new
    out = {k: v for k, v in given.items() if k != "horizon"}
    pairs = horizon_pairs(given, checks)
    if pairs:
        g = np.array([p["exponent"] for p in pairs])
        ci = None
        if len(g) >= 2:  # a t interval over the pairs: each is one seed's vertex on a factor-2 grid
            from scipy import stats

            half = float(stats.t.ppf(0.975, len(g) - 1) * g.std(ddof=1) / np.sqrt(len(g)))
            ci = [float(g.mean()) - half, float(g.mean()) + half]
        out["horizon"] = {"tokens": float(given["data"]["tokens"]), "exponent": float(g.mean()),
                          "exponent_ci": ci, "pairs": pairs}
    return {**out, "horizon_checks": checks}


def horizon_pairs(given: dict, checks: list[dict]) -> list[dict]:
    """Each horizon-checked (arch, size) whose best rate at the file's own budget the file holds (its
    tuned sizes, or a check at its budget): {arch, size, factor, lr_base, lr_at, exponent}, exponent
    = -ln(lr_at / lr_base) / ln(factor), the g of lr* ∝ D^-g between the two budgets."""
    out = []
    for h in checks:
        entry = given["archs"].get(h["arch"], {})
        base = {**entry.get("sizes", {}), **entry.get("check", {}).get("sizes", {})}
        for size, v in h["sizes"].items():
            if size in base and h["factor"] != 1:
                lr0 = float(base[size]["lr_opt"])
                out.append(dict(arch=h["arch"], size=size, factor=h["factor"], lr_base=lr0, lr_at=v["lr_opt"],
                                exponent=-float(np.log(v["lr_opt"] / lr0) / np.log(h["factor"]))))
    return out


def check_summary(study, loss: dict, lr_law: dict) -> dict:
    """Per checked arch and size: the rule's rate, the best checked rate (parabola vertex), their
    ratio, and whether the arch gets its own rule (a ratio beyond tune.own_rule_factor)."""
    t = study.tune
    out = {}
    for arch in names(t.check_archs):
        sizes = {}
        for s in contract.split_list(t.check_sizes):
            cells = [c for c in loss if (c.arch, c.size) == (arch, s)]
            if not cells:
                continue
            n = n_params_of(study, arch, s)
            o = tune_fit.size_optimum(cells, loss)
            lr_opt = float(t.lr_base) * 2.0 ** o.log2_lr
            rule_lr = tune_fit.law_value(lr_law, n)
            sizes[s] = {"n_params": n, "rule_lr": rule_lr, "lr_opt": lr_opt, "ratio": lr_opt / rule_lr,
                        "lr_edge": o.lr_edge, "loss": o.loss,
                        "best": cell_name(o.best, float(t.lr_base))}
        if sizes:
            factor = float(t.own_rule_factor)
            out[arch] = {"sizes": sizes, "own_rule": any(not 1 / factor <= v["ratio"] <= factor
                                                         for v in sizes.values())}
    return out


def _exponent_text(law: dict, name: str) -> str:
    """'lr* = 0.755·N^-0.508, exponent [-0.775, -0.027]: falls with size (resolved)'."""
    text = f"{name} = {law['coefficient']:.3g}·N^{law['exponent']:+.3f}"
    ci = law.get("exponent_ci")
    if not ci:
        return text + " (no interval)"
    trend = ("falls with size" if ci[1] < 0 else "rises with size" if ci[0] > 0 else
             "flat within its interval (a trend in N not resolved)")
    return text + f", exponent [{ci[0]:+.3f}, {ci[1]:+.3f}]: {trend}"


def summary_lines(rule: dict) -> list[str]:
    """cells.md's first screen: each fitted rule with the direction its exponent's interval
    resolves, which checked archs share it, the sizes whose optimum is a bound (the best cell at
    the end of its line), and the seed noise behind the intervals (or why it is not measured)."""
    L = ["## Summary", ""]
    for arch, a in rule["archs"].items():
        if "lr" in a:  # the grid's laws, and an own law fitted through a check's best rates
            L.append(f"- {arch}: {_exponent_text(a['lr'], 'lr*')}; {_exponent_text(a['batch'], 'batch*')}; "
                     f"β2 {a['beta2']:g}.")
    ref = rule["default"]
    shared = {arch: a["check"] for arch, a in rule["archs"].items() if "same_as" in a and "check" in a}
    own = {arch: a["check"] for arch, a in rule["archs"].items() if "check" in a and "same_as" not in a and arch != ref}
    if "check" in rule["archs"][ref]:
        ch = rule["archs"][ref]["check"]
        ratios = ", ".join(f"{s} {v['ratio']:.2f}" for s, v in ch["sizes"].items())
        L.append(f"- {ref}'s own rule checked at other sizes (best checked rate / the rule's: {ratios}): "
                 + ("beyond the factor, tune it again at those sizes." if ch["own_rule"] else "it holds there."))
    for label, group in ((f"{rule['default']}'s rule", shared),
                         ("each its own lr law" if len(own) > 1 else "its own lr law", own)):
        if group:
            ratios = [v["ratio"] for ch in group.values() for v in ch["sizes"].values()]
            L.append(f"- {', '.join(group)}: {label} (best checked rate / {rule['default']}'s: "
                     f"{min(ratios):.2f}–{max(ratios):.2f}).")
    if "horizon" in rule:
        h = rule["horizon"]
        ci = h.get("exponent_ci")
        trend = ("no interval from one pair" if not ci else f"95 % [{ci[0]:+.2f}, {ci[1]:+.2f}]: " +
                 ("falls with length (resolved)" if ci[0] > 0 else "rises with length (resolved)" if ci[1] < 0
                  else "a trend in D not resolved"))
        L.append(f"- The best rate goes with the run's length as D^-g, g = {h['exponent']:.2f} (the mean of "
                 f"{len(h['pairs'])} (arch, size) pairs checked at two budgets, "
                 f"{min(p['exponent'] for p in h['pairs']):.2f}–{max(p['exponent'] for p in h['pairs']):.2f}; "
                 f"{trend}). This file's rate scales with each run's tokens, lr = c·N^e·(D/D0)^-g.")
    for factor in sorted({h["factor"] for h in rule.get("horizon_checks", [])}):
        hs = [h for h in rule["horizon_checks"] if h["factor"] == factor]
        ratios = [v["ratio"] for h in hs for v in h["sizes"].values()]
        L.append(f"- At {factor:.3g}x the rule's token budget ({hs[0]['tokens']:.4g} tokens, a horizon check), "
                 f"{', '.join(h['arch'] for h in hs)}'s best rates are {min(ratios):.2f}–{max(ratios):.2f}x the "
                 "rule's.")
    edges = [f"{arch} {s} ({'lr' if v['lr_edge'] else ''}{' and ' if v['lr_edge'] and v['batch_edge'] else ''}"
             f"{'batch' if v['batch_edge'] else ''})" for arch, a in rule["archs"].items()
             for s, v in a.get("sizes", {}).items() if v["lr_edge"] or v["batch_edge"]]
    if edges:
        L.append(f"- Bounds, not optima (the best cell at the end of its line): {', '.join(edges)}.")
    sd = rule["seed_sd"]
    L.append(f"- Seed-to-seed sd of a cell's loss: {sd['value']:.4f} nats ({sd['pairs']} replicate pairs), the "
             "intervals' noise." if sd["pairs"] else "- Seed-to-seed sd: not measured (no replicate cells); "
             "the intervals carry no seed noise.")
    return L + [""]


def own_cell(arch: str, ch: dict, ref: str) -> str:
    """The check table's last column: whether the arch gets its own rule; for the rule's own arch,
    whether its rule holds at the checked sizes."""
    if arch == ref:
        return "its own rule: tune again" if ch["own_rule"] else "its own rule: holds"
    return "yes" if ch["own_rule"] else "no"


def summary_md(study, rule: dict, rows: list[dict]) -> str:
    """cells.md: the summary, the rules with intervals, the per-arch checks, then every cell."""
    lines = ["# Tuning grid", "", *summary_lines(rule), f"`{rule['command']}` on {rule['machine']}.", "",
             f"Loss: validation loss (nats per byte) at the budget's end under the {rule['data']['estimator']}"
             f" estimator; {float(study.tokens):.4g} tokens per cell; seed-to-seed sd "
             f"{rule['seed_sd']['value']:.4f} ({rule['seed_sd']['pairs']} replicate pairs), the intervals' noise.", "",
             "| arch | lr* = c·N^e | c [95 %] | e [95 %] | batch* = c·N^e | c [95 %] | e [95 %] | β2 |",
             "|---|---|---|---|---|---|---|---|"]
    for arch, a in rule["archs"].items():
        if "same_as" in a:
            continue
        lr, b = a["lr"], a["batch"]
        lines.append(f"| {arch} | {lr['coefficient']:.3g}·N^{lr['exponent']:+.3f} | {_fmt_ci(lr['coefficient_ci'])} | "
                     f"{_fmt_ci(lr['exponent_ci'], '{:+.3f}')} | {b['coefficient']:.3g}·N^{b['exponent']:+.3f} | "
                     f"{_fmt_ci(b['coefficient_ci'])} | {_fmt_ci(b['exponent_ci'], '{:+.3f}')} | {a['beta2']:g} |")
    lines += ["", "Per size (vertex of the parabola through the best cell and its neighbours; 'edge': the best "
              "was the end of its line, a bound):", "",
              "| arch | size | N | lr* [95 %] | batch* [95 %] | best cell | loss |", "|---|---|---|---|---|---|---|"]
    for arch, a in rule["archs"].items():
        for s, v in a.get("sizes", {}).items():
            lines.append(f"| {arch} | {s} | {v['n_params']:.4g} | {v['lr_opt']:.3g} {_fmt_ci(v['lr_opt_ci'])}"
                         f"{' edge' if v['lr_edge'] else ''} | {v['batch_opt']:.3g} {_fmt_ci(v['batch_opt_ci'])}"
                         f"{' edge' if v['batch_edge'] else ''} | {v['best']} | {v['loss']:.4f} |")
    checks = {arch: a["check"] for arch, a in rule["archs"].items() if "check" in a}
    if checks:
        lines += ["", f"Linear archs checked against {rule['default']}'s rule (own rule when the best rate is "
                  "more than the preset's factor away at a size):", "",
                  "| arch | size | rule lr | best lr | ratio | own rule |", "|---|---|---|---|---|---|"]
        for arch, ch in checks.items():
            for s, v in ch["sizes"].items():
                lines.append(f"| {arch} | {s} | {v['rule_lr']:.3g} | {v['lr_opt']:.3g}{' edge' if v['lr_edge'] else ''}"
                             f" | {v['ratio']:.2f} | {own_cell(arch, ch, rule['default'])} |")
    horizon = rule.get("horizon_checks", [])
    if horizon:
        lines += ["", f"Checked at other token budgets than the rule's {rule['data']['tokens']:.4g} (horizon checks: "
                  "the best rate against the one the rule gives that size at any budget):", "",
                  "| arch | size | tokens | × the rule's | rule lr | best lr | ratio |", "|---|---|---|---|---|---|---|"]
        for h in horizon:
            for s, v in h["sizes"].items():
                lines.append(f"| {h['arch']} | {s} | {h['tokens']:.4g} | {h['factor']:.3g} | {v['rule_lr']:.3g} | "
                             f"{v['lr_opt']:.3g}{' edge' if v['lr_edge'] else ''} | {v['ratio']:.2f} |")
    lines += ["", "Every cell (loss under cooldown; val_loss at the last checkpoint; **best** per size):", "",
              "| arch | size | lr | batch | β2 | seed | loss | val_loss |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = "**" if r["best"] else ""
        lines.append(f"| {r['arch']} | {r['size']} | {r['lr']:g} | {r['batch']} | {r['beta2']:g} | {r['seed']} | "
                     f"{mark}{r['loss']}{mark} | {r['val_loss']} |")
    return "\n".join(lines) + "\n"
