"""The laws' own checks, computed once as data and rendered: each arch's L(N, D) size by size in both
parameter counts, and the backtests of the ladder, along N and along D.

    found.update(write(study, tabs, per, seed_sd, counts, workdir))   # the hook in scaling.results
    found["laws_by_size"] = by_size(tabs, per, counts, count)   # {count: {estimator: {arch: full_law}}}
    found["backtest"] = backtest(table, seed_sd, counts, count, workdir, n_boot, seed)
    found["backtest_tokens"] = backtest_tokens(tabs, per, counts, count, workdir, n_boot, seed)
    lines = report_section(found); lines = console_lines(found)   # scaling.report, scaling.runner

by_size fits approach 3 (fit.holdout.full_law: every size, replicate means, bounded) under every
loss estimator and both parameter counts (`non_embedding`: the study's N, as the paper counts it;
`total`: with the embedding and the head, as Pearce & Song 2024 and Porian et al. 2024 count it),
giving each size's mean residual over the second half of its points, that residual in seed sds of
its replicate mean, the lack of fit and E, and for the laws' own fits (the first estimator,
`study.fit.count`) E's profile (fit.irreducible: is E identified, or only bounded from above?). backtest (fit.backtest) fits the k smallest sizes and predicts size k + 1
for every k >= 3 under the laws' estimator and `study.fit.count`, and writes DIR/fit/backtest.csv.
backtest_tokens (fit.backtest.backtest_tokens) fits every size's first half of tokens and predicts each
size's end, under every estimator: the extrapolation in D that a prediction beyond the ladder on its
own sizes makes (study.predict), measured inside the ladder: what such a prediction can be expected
to miss by, estimator by estimator; DIR/fit/backtest_tokens.csv.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.study import files

COUNTS = ("non_embedding", "total")
COUNT_LABELS = {"non_embedding": "N without the embedding (the paper's count)",
                "total": "N with the embedding and head"}
Z_MAX = 2.0  # a size's mean residual within this many seed sds of its replicate mean counts as on the law
TOKENS_FACTOR = 2.0  # the backtest along D: each run's first 1/2 of tokens predicts its end (3 cooldown
# points per run, at 1/4, 1/2 and 1, leave two below the half)


def write(study, tabs: dict, per: dict, seed_sd, counts: dict, workdir: str) -> dict:
    """{"laws_by_size", "backtest", "backtest_tokens"} for DIR/findings.json, writing DIR/fit/backtest.csv
    and DIR/fit/backtest_tokens.csv. tabs: the
    study's tables by estimator (the first is the laws' estimator); per: verdicts' by_estimator
    (each with its seed_sd_pooled); seed_sd: the laws' estimator's fit.bootstrap.SeedSd; counts:
    results.param_counts."""
    n_boot = max(int(study.fit.bootstrap), 20)
    first = next(iter(tabs))
    return dict(laws_by_size=by_size(tabs, per, counts, count_of(study)),
                backtest=backtest(tabs[first], seed_sd, counts, count_of(study), workdir, n_boot, int(study.fit.seed)),
                backtest_tokens=backtest_tokens(tabs, per, counts, count_of(study), workdir, n_boot, int(study.fit.seed)))


def count_of(study) -> str:
    """study.fit.count: the parameter count of the laws' held-out and backtest fits."""
    c = str(study.fit.get("count", "non_embedding"))
    if c not in COUNTS:
        raise ValueError(f"study.fit.count={c!r}; use one of {', '.join(COUNTS)}")
    return c


def recounted(table, counts: dict, count: str):
    """`table` with n_params in `count` (counts: study.scaling.results.param_counts)."""
    from linscale_jax.fit.table import recount

    if count == "non_embedding":
        return table
    return recount(table, {a: {n: v[count] for n, v in by.items()} for a, by in counts.items()})


def by_size(tabs: dict, per: dict, counts: dict, count: str = "non_embedding") -> dict:
    """{count: {estimator: {arch: fit.holdout.full_law, or {"note"}}}} (module docstring); each
    estimator's residuals are judged against its own pooled seed sd. The laws' own fits (the first
    estimator, `count`) also get "e_profile" (fit.irreducible.profile: the E values their lack of
    fit does not reject, and whether E is identified)."""
    from linscale_jax.fit import bootstrap as bs
    from linscale_jax.fit import holdout, irreducible
    from linscale_jax.fit.table import FitError

    out = {}
    for c in COUNTS:
        out[c] = {}
        for est, t in tabs.items():
            sd = bs.SeedSd.of(per[est]["seed_sd_pooled"])
            out[c][est] = {}
            for a in t.archs:
                try:
                    mine = recounted(t.select(a), counts, c)
                    out[c][est][a] = holdout.full_law(mine, sd)
                    if c == count and est == next(iter(tabs)):
                        out[c][est][a]["e_profile"] = irreducible.profile(bs.curves_of(mine), sd)
                except FitError as e:
                    out[c][est][a] = dict(note=str(e))
    return out


def backtest(table, seed_sd, counts: dict, count: str, workdir: str, n_boot: int, seed: int) -> dict:
    """{"rows", "summary", "errors", "count"}: fit.backtest per arch of `table` (the laws' estimator)
    in `count`, written to DIR/fit/backtest.csv with n_params in the table's own (non-embedding)
    count; an arch with too few sizes is named in `errors`."""
    from linscale_jax.fit import backtest as bt
    from linscale_jax.fit.table import FitError

    rows, errors = [], {}
    for a in table.archs:
        back = {v[count] if count != "non_embedding" else n: n for n, v in counts.get(a, {}).items()}
        mine = table.select(a)
        n = len(np.unique(mine.n_params))
        if n <= bt.K_MIN:
            errors[a] = (f"{n} size(s); the backtest fits {bt.K_MIN} and predicts the next: give study.sizes "
                         f"{bt.K_MIN + 1} or more")
            continue
        try:
            got = bt.backtest(recounted(mine, counts, count), seed_sd=seed_sd, n_boot=n_boot, seed=seed)
        except FitError as e:
            errors[a] = str(e)
            continue
        rows += [dict(r, n_params=back.get(r["n_params"], r["n_params"])) for r in got]
    bt.write_csv(rows, files.study_path(workdir, files.STUDY_FIT, files.BACKTEST_CSV))
    return dict(rows=rows, summary=bt.summary(rows), errors=errors, count=count)


def backtest_tokens(tabs: dict, per: dict, counts: dict, count: str, workdir: str, n_boot: int, seed: int) -> dict:
    """{"factor", "count", "rows", "summary": {estimator: {arch: ...}}, "errors": {estimator: {arch: why}}}:
    fit.backtest.backtest_tokens at TOKENS_FACTOR per arch and estimator (each with its own pooled seed
    sd), written to DIR/fit/backtest_tokens.csv (n_params without the embedding)."""
    from linscale_jax.fit import backtest as bt
    from linscale_jax.fit import bootstrap as bs
    from linscale_jax.fit.table import FitError

    rows, summary, errors = [], {}, {}
    for est, t in tabs.items():
        sd = bs.SeedSd.of(per[est]["seed_sd_pooled"])
        mine = []
        for a in t.archs:
            back = {v[count] if count != "non_embedding" else n: n for n, v in counts.get(a, {}).items()}
            try:
                got = bt.backtest_tokens(recounted(t.select(a), counts, count), factor=TOKENS_FACTOR, seed_sd=sd,
                                         n_boot=n_boot, seed=seed)
            except FitError as e:
                errors.setdefault(est, {})[a] = str(e)
                continue
            mine += [dict(r, estimator=est, n_params=back.get(r["n_params"], r["n_params"])) for r in got]
        summary[est] = bt.summary(mine)
        rows += mine
    bt.write_tokens_csv(rows, files.study_path(workdir, files.STUDY_FIT, files.BACKTEST_TOKENS_CSV))
    return dict(factor=TOKENS_FACTOR, count=count, rows=rows, summary=summary, errors=errors)


def _z(s: dict) -> str:
    return f"{s['residual']:+.3f}" + ("" if s.get("z") is None else f" ({s['z']:+.1f})")


def _lof(r: dict) -> str:
    lof = r["lack_of_fit"]
    if lof.get("p") is None:
        return lof.get("note", "—")
    df2 = "∞" if lof["df2"] is None else f"{lof['df2']:g}"  # None: an assumed seed sd, infinite df
    return f"F {lof['F']:.2g} ({lof['df1']}, {df2}), p {lof['p']:.2g}"


def _e(r: dict) -> str:
    w = r["law"]
    out = f"{w['E']:.3g}" + (" (at its bound)" if "E" in (w.get("at_bound") or []) else "")
    prof = r.get("e_profile")
    if prof and prof["not_rejected"] is None and all(p is not None for p in prof["p"]):
        return out + "; every E rejected"
    if prof and prof["not_rejected"] is not None:
        return out + "; " + e_text(r).replace("not identified", "**not identified**")
    return out


def e_text(r: dict) -> str | None:
    """'not identified (any E <= 1.2 fits)', 'identified [0.6, 1.1]', or None without a profile."""
    prof = r.get("e_profile")
    if not prof or prof["not_rejected"] is None:
        return None
    lo, hi = prof["not_rejected"]
    if not prof["identified"]:
        return f"E not identified (any E <= {hi:.2g} fits)"
    return f"E identified [{lo:.2g}, {hi:.2g}]" if hi > lo else f"only E = {lo:.2g} of the grid fits"


def on_law(r: dict) -> bool:
    """Every size's mean residual within Z_MAX seed sds, and the lack of fit not rejected (p > 0.05)."""
    lof = r.get("lack_of_fit") or {}
    return (all(s.get("z") is not None and abs(s["z"]) <= Z_MAX for s in r.get("sizes", []))
            and lof.get("p") is not None and lof["p"] > 0.05)


def report_section(found) -> list[str]:
    """The report's markdown lines: the laws size by size in both counts, then the backtest. found:
    DIR/findings.json as a dict, or the report's Doc (its .found), so it serves as a report section."""
    found = getattr(found, "found", found)
    by = found.get("laws_by_size")
    if not by:
        return []
    ests = found["estimators"]
    L = ["## The laws size by size", "",
         "Each arch's L(N, D) = E + A/N^α + B/D^β (approach 3 on every size's replicate-mean curve, α and β "
         "in [0.01, 2.5]), in both parameter counts. Per size: the mean residual (actual − law, nats) over the "
         "second half of its points and, in brackets, that residual in seed sds of the size's replicate mean "
         f"(s/√r, s the estimator's pooled seed sd); a size on the law lies within ±{Z_MAX:g}. Lack of fit: "
         "F = Σ r ū² / ((m − 3) s²) on (m − 3, ν) df; p > 0.05 is not rejected. E at its bound is an "
         "irreducible loss the sizes do not pin down. For the laws' own fits E is also profiled "
         "(fit.irreducible): the law refitted at each fixed E and its lack of fit tested (on m − 2 df); "
         "the E values not rejected form a 95% confidence set. E is identified when that set excludes "
         "E's lower bound (a law with no floor); otherwise the ladder bounds E from above only, and the "
         "laws' E is not a measurement: L(N, D) is then a description over the ladder's range, and what "
         "it says past that range (L(C), N_opt, a prediction beyond the ladder) depends on the E it "
         "assumes.", ""]
    for est in ests:
        for count in COUNTS:
            archs = by.get(count, {}).get(est, {})
            fitted = [r for r in archs.values() if "sizes" in r]
            if not fitted:
                continue
            n_sizes = max(len(r["sizes"]) for r in fitted)
            L += [f"**{est}, {COUNT_LABELS[count]}**", "",
                  "| arch | " + " | ".join(f"size {i + 1}" for i in range(n_sizes)) + " | lack of fit | E | α, β | on the law |",
                  "|---|" + "---|" * (n_sizes + 4)]
            for a, r in archs.items():
                if "sizes" not in r:
                    L.append(f"| {a} | not fitted: {r.get('note', '')} |" + " |" * (n_sizes + 3))
                    continue
                w = r["law"]
                cells = [_z(s) for s in r["sizes"]] + ["—"] * (n_sizes - len(r["sizes"]))
                L.append(f"| {a} | " + " | ".join(cells) + f" | {_lof(r)} | {_e(r)} | {w['alpha']:.3g}, {w['beta']:.3g} | "
                         f"{'yes' if on_law(r) else '**no**'} |")
            sizes = fitted[0]["sizes"]
            L += ["", "Sizes (N in this count): " + ", ".join(f"{i + 1}: {s['n_params']:.3g}" for i, s in enumerate(sizes)), ""]
    L += backtest_section(found.get("backtest"))
    L += tokens_section(found.get("backtest_tokens"))
    return L


def backtest_section(bt: dict | None) -> list[str]:
    if not bt or not (bt.get("rows") or bt.get("errors")):
        return []
    L = ["## Backtest of the ladder", "",
         "The law (approach 3, the laws' estimator, " + COUNT_LABELS[bt["count"]] + ") fitted on the k smallest sizes "
         "predicts size k + 1's final loss, for every k >= 3, with the 95% interval for the observed value (refits "
         "on draws with the sizes fixed, plus the predicted run's seed offset and checkpoint noise). A ladder whose "
         "law predicts has errors that do not grow with k and about 95% of its sizes inside. Table: "
         "`fit/backtest.csv` (N without the embedding).", "",
         "| arch | k (sizes fitted) | N predicted | predicted [95%] | actual | error | inside |", "|---|---|---|---|---|---|---|"]
    for r in bt["rows"]:
        ci = "no interval" if r["ci_low"] is None else f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]"
        inside = "no interval" if r["inside"] is None else "yes" if r["inside"] else "**no**"
        L.append(f"| {r['arch']} | {r['rungs_fitted']} | {r['n_params']:.3g} | {r['predicted']:.4f} {ci} | "
                 f"{r['actual']:.4f} | {r['error']:+.4f} | {inside} |")
    L += ["", "| arch | steps | mean abs error | max abs error | inside |", "|---|---|---|---|---|"]
    for a, s in bt["summary"].items():
        L.append(f"| {a} | {s['steps']} | {s['mean_abs_error']:.4f} | {s['max_abs_error']:.4f} | "
                 f"{s['inside']} of {s['with_interval']} |")
    for a, e in bt.get("errors", {}).items():
        L.append(f"\n**No backtest for {a}**: {e}")
    return L + [""]


def tokens_section(bt: dict | None) -> list[str]:
    if not bt or not bt.get("rows"):
        return []
    f = f"{bt['factor']:g}"
    L = ["## Backtest along D", "",
         f"The law (approach 3, {COUNT_LABELS[bt['count']]}) fitted on every size's checkpoints up to 1/{f} of its "
         f"run's tokens predicts each size's final loss, {f}× further, under each estimator, with the 95% interval "
         "for the observed value. A prediction beyond the ladder on the ladder's own sizes extrapolates the same "
         "way (in D, at fixed N): its errors here are what to expect of such a prediction, estimator by estimator. "
         "Error: actual − predicted, nats, * outside the interval. Table: `fit/backtest_tokens.csv`.", ""]
    n_sizes = max(len({r["n_params"] for r in bt["rows"] if r["arch"] == a}) for a in {r["arch"] for r in bt["rows"]})
    L += ["| estimator | arch | " + " | ".join(f"size {i + 1}" for i in range(n_sizes)) + " | mean abs error | inside |",
          "|---|---|" + "---|" * (n_sizes + 2)]
    for est, by in bt["summary"].items():
        for a, s in by.items():
            mine = sorted((r for r in bt["rows"] if r["estimator"] == est and r["arch"] == a), key=lambda r: r["n_params"])
            cells = [f"{r['error']:+.3f}" + ("*" if r["inside"] is False else "") for r in mine]
            cells += ["—"] * (n_sizes - len(cells))
            L.append(f"| {est} | {a} | " + " | ".join(cells) + f" | {s['mean_abs_error']:.3f} | "
                     f"{s['inside']} of {s['with_interval']} |")
    L += ["", "Size i: each arch's i-th smallest N, as in the laws' tables."]
    for est, by in bt.get("errors", {}).items():
        for a, e in by.items():
            L.append(f"\n**No backtest along D for {a} ({est})**: {e}")
    return L + [""]


def seed_sd_line(found: dict) -> str:
    """One line: per estimator the seed sd the intervals use, and where a prior is in it, the own
    and the prior's with the F test (fit.bootstrap.with_prior)."""
    cells = []
    for est, by in found["by_estimator"].items():
        pool, check = by["seed_sd_pooled"], by.get("seed_sd_prior")
        df = "assumed" if pool["df"] is None else f"{pool['df']:g} df"
        cell = f"{est} {pool['sd']:.4f} ({df})"
        if check:
            own, prior = by["seed_sd_own"], check["prior"]
            test = "" if check["p"] is None else f", F test p {check['p']:.2g}"
            if not own["df"]:
                cell += f": the prior alone ({prior['source']}; this study trains no replicates)"
            else:
                cell += (f" = own {own['sd']:.4f} ({own['df']:g} df) + prior {prior['sd']:.4f} ({prior['df']:g} df)"
                         if check["used"] else f": own; prior {prior['sd']:.4f} ({prior['df']:g} df) rejected") + test
        cells.append(cell)
    return "[study] seed sd the intervals use: " + "; ".join(cells)


def console_lines(found: dict) -> list[str]:
    """The laws' fit per arch under the laws' estimator and count, the backtest's summary, and
    the archs without a backtest (fewer than 4 sizes), one line each kind."""
    out = [seed_sd_line(found)] if found.get("by_estimator") else []
    by, bt = found.get("laws_by_size"), found.get("backtest")
    if by and bt:
        est, count = found["estimators"][0], bt["count"]
        cells = []
        for a, r in by[count][est].items():
            if "sizes" in r:
                p = r["lack_of_fit"].get("p")
                worst = max(abs(s["z"]) for s in r["sizes"]) if all(s.get("z") is not None for s in r["sizes"]) else None
                cells.append(f"{a} p {'—' if p is None else format(p, '.2g')}, worst size "
                             f"{'—' if worst is None else format(worst, '.1f')} sd"
                             + (f", {e_text(r)}" if e_text(r) else ""))
            else:
                cells.append(f"{a} not fitted")
        out.append(f"[study] laws ({est}, {COUNT_LABELS[count]}): " + "; ".join(cells))
    if bt and bt.get("summary"):
        out.append("[study] backtest (fit k sizes, predict k + 1): " + "; ".join(
            f"{a} mean |error| {s['mean_abs_error']:.3f}, {s['inside']}/{s['with_interval']} inside"
            for a, s in bt["summary"].items()) + f" (fit/{files.BACKTEST_CSV})")
    bd = found.get("backtest_tokens")
    if bd and bd.get("summary"):
        out.append(f"[study] backtest along D (each run's first 1/{bd['factor']:g} predicts its end), mean |error|: " + "; ".join(
            f"{est} " + ", ".join(f"{a} {s['mean_abs_error']:.3f}" for a, s in by.items())
            for est, by in bd["summary"].items() if by) + f" (fit/{files.BACKTEST_TOKENS_CSV})")
    why = {}
    for a, e in ((bt or {}).get("errors") or {}).items():
        why.setdefault(e, []).append(a)
    out += [f"[study] no backtest for {', '.join(archs)}: {e}" for e, archs in why.items()]
    return out

