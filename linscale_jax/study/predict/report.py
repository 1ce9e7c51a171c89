"""P/report.md of a prediction beyond the ladder, and its console lines, from the joined data.

    text = "\\n".join(lines(joined)); console_lines(joined)    # joined: experiment.join's dict
"""

from __future__ import annotations

from linscale_jax.train.metrics import fmt_time

COUNT_WORDS = {"non_embedding": "N without the embedding", "total": "N with the embedding and head"}


FORM_WORDS = {"additive": "approach 3: E + A/N^α + B/D^β", "kaplan": "Kaplan's E + ((A/N)^(α/β) + B/D)^β",
              "auto": "per arch, approach 3's E + A/N^α + B/D^β or Kaplan's E + ((A/N)^(α/β) + B/D)^β, the one that "
                      "misses the ladder's sizes least (study.form=auto; the laws' table below)"}


def _f(x, d=4) -> str:
    return "—" if x is None else f"{x:.{d}f}"


def _ci(lo, hi) -> str:
    return "no interval" if lo is None else f"[{lo:.4f}, {hi:.4f}]"


def _yes(x) -> str:
    return "—" if x is None else "yes" if x else "**no**"


def _wins(w: dict) -> str:
    parts = []
    for size, v in w["by_neighbour"].items():
        if v["diff"] is None:
            parts.append(f"vs {size}: not measured")
            continue
        iv = "" if v.get("ci_low") is None else f" [{v['ci_low']:+.3f}, {v['ci_high']:+.3f}]"
        parts.append(f"vs {size}: {v['verdict'].replace('_', ' ')} ({v['diff']:+.3f}{iv})")
    if w["verdict"] == "not measured":
        return f"not measured ({'; '.join(parts)})"
    return f"**{w['verdict']}** ({'; '.join(parts)}; lowest measured: {w['lowest_actual']})"


def rule_lines(fc: dict) -> list[str]:
    notes = [(a, g) for a, p in fc["archs"].items() for g in p["rungs"] if g.get("rule")]
    if not notes:
        return ["Every rung lies inside the sizes the ladder's learning-rate rule was fitted on; the rungs train "
                "under that rule as the ladder did."]
    r0 = notes[0][1]["rule"]
    L = [f"**The learning-rate rule is extrapolated.** The ladder's rule (optim.rule={r0['rule']}) was fitted on "
         f"N = {r0['range'][0]:.3g}–{r0['range'][1]:.3g}; these rungs lie outside it and train at the rule's laws "
         "evaluated at their N (study.rule=extrapolate; study.rule=as_given refuses them instead):", ""]
    L += [f"- {a}-{g['size']} (N = {g['rule']['n_params']:.3g}): lr {g['rule']['lr']:.4g}, batch "
          f"{g['rule']['batch_size']}, β2 {g['rule']['b2']:g}, warmup {g['rule']['warmup_steps']} steps"
          + _continued(g["rule"]) for a, g in notes]
    return L


def _continued(note: dict) -> str:
    c = note.get("lr_continued")
    if not c:
        return ""
    return (f" (the arch's own lr law continued from its rate at N = {c['n_edge']:.3g} along the default law's "
            f"exponent {c['exponent']:.3f}: protocol.continue_lr)")


def _chance(s: dict) -> list[str]:
    c = s.get("chance")
    if not c:
        return []
    return [f"**The target's chance before training**, if the intervals hold (the share of each N_opt's interval "
            f"draws within {s['target']:g} of its prediction and inside): "
            + ", ".join(f"{a} {p:.2f}" for a, p in c["archs"].items())
            + f"; {c['needed']} or more of {len(c['archs'])} archs: **{c['overall']:.2f}** (archs independent).", ""]


def _act(row: dict) -> str:
    """A rung's actual: its seeds' mean, or how many of its seeds are measured so far."""
    if row.get("actual") is not None or not row.get("measured"):
        return _f(row.get("actual"))
    return f"— ({row['measured']} of {row['seeds']} seeds)"


def _ladder_words(lad: dict, st: dict) -> str:
    """The ladder the laws are fitted to: the study, or it completed with the replicate runs it lacked."""
    if not lad.get("source"):
        return f"The ladder: `{lad['workdir']}` (preset {st['ladder_preset']})."
    added = lad.get("added", [])
    sizes = ", ".join(dict.fromkeys(n.rsplit("-seed", 1)[0].split("-", 1)[1] for n in added))
    return (f"The ladder: `{lad['source']}` (preset {st['ladder_preset']}), completed in `{lad['workdir']}` with "
            f"{len(added)} replicate run(s) it lacked (at {sizes}: study.replicates), so each of those sizes is a "
            "mean of more seeds; its report there gives the completed ladder's laws.")


def lines(joined: dict) -> list[str]:
    fc, v, c, st = joined["forecast"], joined["verdicts"], joined["cost"], joined["study"]
    lad, s = fc["ladder"], v["summary"]
    sd, k = lad["seed_sd"], int(st.get("seeds", 1))
    one = "one observed run" if k == 1 else f"the mean of {k} observed runs (init seeds)"
    L = ["# A prediction beyond the ladder", "",
         f"**Target** (|actual − predicted| ≤ {s['target']:g} nats at the predicted N_opt and actual inside its 95% "
         f"interval, for at least 3 of 4 archs): **{s['overall']}**.", ""] + _chance(s) + [
         _ladder_words(lad, st) + " Its laws L(N, D) "
         f"({FORM_WORDS.get(fc['settings'].get('form', 'additive'), fc['settings'].get('form'))}; "
         f"{fc['settings']['bootstrap']} refits on draws with the sizes fixed) under its laws' "
         f"estimator, **{lad['estimator']}**, in {COUNT_WORDS.get(lad['count'], lad['count'])}. The compute: "
         f"C = {st['compute_factor']:g} × its largest run ({lad['largest']['name']}, {lad['largest']['flops']:.4g} "
         f"FLOPs, Table-1 accounting) = **{fc['compute']:.4g} FLOPs**. N_opt is the size of the ladder's shape "
         "(the depth and head dim of its largest size, in linscale_jax/models/sizes.py LADDER) that the law puts "
         "lowest at C, its interval the spread of that choice over the refits; the rungs are N_opt and its "
         "neighbours, each trained on D = C / its FLOPs per token under the ladder's protocol. The prediction was "
         "written to predictions.json before the rungs trained. "
         + ("" if k == 1 else f"Each rung trains at {k} init seeds (study.seeds) and its actual is their mean. ")
         + f"A loss interval is for {one}: the refits plus a seed offset (seed sd {sd['sd']:.4f}, {sd['source']}"
         + ("" if k == 1 else f", over √{k}") + ") and checkpoint noise.", ""]
    L += rule_lines(fc) + [""]
    L += ["## Predicted against actual at N_opt", "",
          "| arch | N_opt [95%] | predicted [95%] | actual | actual − predicted | within target | inside | "
          "N_opt wins? |", "|---|---|---|---|---|---|---|---|"]
    for a, p in fc["archs"].items():
        o, r = p["optimum"], v["archs"][a]
        opt = next(g for g in p["rungs"] if g["predicted_optimum"])
        nci = "" if o["n_opt_ci"] is None else f" [{o['n_opt_ci'][0]:.3g}, {o['n_opt_ci'][1]:.3g}]"
        err = "—" if r["error"] is None else f"{r['error']:+.4f}"
        act = next((x for x in joined["rows"] if x["arch"] == a and x["predicted_optimum"]), {})
        L.append(f"| {a} | {opt['size']} ({o['n_opt']:.3g}){nci} | {opt['predicted']:.4f} "
                 f"{_ci(opt['ci_low'], opt['ci_high'])} | {_act(act)} | {err} | {_yes(r['within'])} | "
                 f"{_yes(r['inside'])} | {_wins(r['wins'])} |")
    pair = ("two single runs (sd √2 × the seed sd)" if k == 1
            else f"two means of {k} runs (sd {(2 / k) ** 0.5:.2g} × the seed sd)")
    L += ["", f"N_opt in {COUNT_WORDS.get(lad['count'], lad['count'])}. Wins: N_opt's actual minus a neighbour's, a "
          f"difference of {pair} with its 95% interval; better (N_opt lower), worse, "
          f"equivalent (the 90% interval inside ±{s['margin']:g} nats, the ladder's margin) or not resolved. "
          "N_opt wins when it is better than both neighbours.", "",
          "## Every rung", "", "| arch | size | N | tokens | FLOPs | steps | batch | lr | predicted [95%] | actual | "
          "actual − predicted | cooldown branch |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for a, p in fc["archs"].items():
        for g in p["rungs"]:
            row = next((x for x in joined["rows"] if x["arch"] == a and x["size"] == g["size"]), {})
            act = row.get("actual")
            err = "—" if act is None else f"{act - g['predicted']:+.4f}"
            L.append(f"| {a} | {g['size']}{' (N_opt)' if g['predicted_optimum'] else ''} | {g['n_params']:.4g} | "
                     f"{g['tokens']:.4g} | {g['flops']:.4g} | {g['steps']} | {g['batch_size']} | {g['lr']:.4g} | "
                     f"{g['predicted']:.4f} {_ci(g['ci_low'], g['ci_high'])} | {_act(row)} | {err} | "
                     f"{_f(row.get('cooldown'))} |")
    L += ["", "Tokens and FLOPs are the loss point's (for cooldown, the end of the branch). The cooldown branch: the "
          "rung's loss after its rate decays over the cooldown's share of steps off its last checkpoint, another "
          "estimator than the laws' (not judged; — under the cooldown estimator, where it is the actual). Table: "
          "`prediction.csv`; figure: `prediction.png`.", "", "## The laws", "",
          "| arch | form | misses its sizes by (RMS, nats) | sizes fitted | E | A | α | B | β | at a bound | "
          "failed refits |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for a, p in fc["archs"].items():
        w = p["law"]
        rms = ", ".join(f"{f} {x:.4f}" for f, x in (p.get("form_rms") or {}).items()) or "—"
        L.append(f"| {a} | {w.get('form', 'additive')} | {rms} | {p['sizes_fitted']} | {w['E']:.4g} | {w['A']:.4g} | "
                 f"{w['alpha']:.3g} | {w['B']:.4g} | {w['beta']:.3g} | {', '.join(w.get('at_bound') or []) or '—'} | "
                 f"{p['failed']:.0%} |")
    L += ["", "Form: additive is approach 3's E + A/N^α + B/D^β; kaplan is Kaplan et al.'s joint E + ((A/N)^(α/β) + "
          "B/D)^β, where the tokens at which a size stops gaining grow with N. Under study.form=auto each arch's law is "
          "the form whose fit misses the ladder's sizes least: the RMS over sizes of the mean residual over the "
          "second half of each size's points, listed per form."]
    L += along_lines(joined.get("along") or [])
    L += ["", "## Cost", ""]
    done = ", ".join(f"{n} {fmt_time(t)}" for n, t in c["runs"].items())
    L.append(f"{c['trained']} of {k * sum(len(p['rungs']) for p in fc['archs'].values())} runs processed; their wall "
             f"time (train, eval and cooldown, every invocation): {fmt_time(c['seconds'])}"
             + (f" ({done})" if done else "") + "."
             + ("" if c.get("runs_s") is None else f" This invocation: {fmt_time(c['runs_s'])} on {c['slots']} "
                "worker(s)."))
    a = c.get("added")
    if a:
        L.append(f"The {a['trained']} replicate run(s) added to the ladder ({lad['workdir']}): their wall time (train, eval "
                 f"and cooldown, every invocation): {fmt_time(a['seconds'])}.")
    return L


def along_lines(rows: list[dict]) -> list[str]:
    """The section on the error along each rung's tokens (study.predict.along), [] when none is measured."""
    if not rows:
        return []
    L = ["", "## The error along each rung's tokens", "",
         "| arch | size | the ladder's tokens at this N | error there | at ¼ of the rung's tokens | at ½ | at the end |",
         "|---|---|---|---|---|---|---|"]
    for r in rows:
        seen = "beyond the ladder's N" if r["seen"] is None else f"{r['seen']:.3g}"
        L.append(f"| {r['arch']} | {r['size']} | {seen} | {_sg(r['at_seen'])} | {_sg(r['quarter'])} | "
                 f"{_sg(r['half'])} | {_sg(r['end'])} |")
    L += ["", "Actual − the law's point fit at the rung's checkpoints (the mean over its seeds), in nats. At a size "
          "the ladder trained, up to that ladder run's tokens the law interpolates and beyond them it extrapolates "
          "along D alone; an error that grows past them is the law's D term, not its N term. Every checkpoint: "
          "`prediction_curves.csv`."]
    return L


def _sg(x) -> str:
    return "—" if x is None else f"{x:+.3f}"


def forecast_lines(fc: dict) -> list[str]:
    """The prediction as --dry_run prints it: per arch N_opt, its predicted loss and the check's chance."""
    from linscale_jax.study.predict import outcome

    L = ["The prediction (predictions.json, written before anything trains):"]
    for a, p in fc["archs"].items():
        g = next(x for x in p["rungs"] if x["predicted_optimum"])
        ch = "" if g.get("p_met") is None else f", chance of the check {g['p_met']:.2f}"
        L.append(f"  {a}: N_opt {g['size']} (N = {g['n_params']:.3g}), predicted {g['predicted']:.4f} "
                 f"{_ci(g['ci_low'], g['ci_high'])}{ch}")
    c = outcome.chance(fc)
    if c:
        L.append(f"  the target ({c['needed']} or more of {len(c['archs'])} archs): chance {c['overall']:.2f} if the "
                 "intervals hold")
    return L


def console_lines(joined: dict) -> list[str]:
    v, out = joined["verdicts"], []
    for a, r in v["archs"].items():
        opt = next(x for x in joined["rows"] if x["arch"] == a and x["predicted_optimum"])
        act = "not measured" if opt["actual"] is None else f"actual {opt['actual']:.4f}, error {r['error']:+.4f}, " \
              f"inside: {_yes(r['inside'])}, N_opt {r['wins']['verdict']}"
        out.append(f"[predict] {a}: N_opt {opt['size']}, predicted {opt['predicted']:.4f} "
                   f"{_ci(opt['ci_low'], opt['ci_high'])}, {act}")
    c = v["summary"].get("chance")
    out.append(f"[predict] target: {v['summary']['overall']}"
               + ("" if not c else f" (its chance before training, if the intervals hold: {c['overall']:.2f})"))
    return out
