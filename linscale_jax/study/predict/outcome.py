"""Predicted against actual: each rung's measured loss, P/prediction.csv and the verdicts per arch.

    rows = rows_of(fc, runs, estimator)        # one row per rung: COLUMNS (+ size, cooldown, seeds, measured)
    write_csv(rows, P/prediction.csv)
    v = judge(fc, rows, target=0.03)           # {arch: {...}, "summary": {...}}

actual: the rung's loss under the laws' estimator at its loss point (protocol.point_tokens): the
val_loss of its last checkpoint, the same of its cooldown branch off that checkpoint, or the
averaged weights' (val_loss_avg), averaged over the rung's seeds (study.seeds); beside it, under
another estimator, the cooldown branch's loss (`cooldown`: what the rung reaches with its rate
decayed, not judged). Per arch, on N_opt's row:
error = actual − predicted, `within` (|error| ≤ target), `inside` (actual inside the 95% interval for
an observed run, or a mean of study.seeds runs) and `met` (both).
Whether N_opt wins: N_opt's actual against each neighbour's, a difference of two means of k seeds
whose sd is √(2/k) times the ladder's seed sd (drawn from its uncertainty,
fit.bootstrap.SeedSd.draws), judged by scaling.verdicts.outcome with the ladder's margin: better
(N_opt lower), worse, equivalent, not resolved; N_opt wins when it is better than both, loses when
worse than either.
"""

from __future__ import annotations

import csv
import os

import numpy as np

COLUMNS = ("arch", "n_params", "tokens", "flops", "predicted", "ci_low", "ci_high", "actual", "predicted_optimum")
TARGET_ARCHS = 3  # the target: met for at least 3 ...
OF_ARCHS = 4  # ... of the 4 archs


def actual_loss(run, estimator: str) -> float | None:
    """The run's loss at its loss point (module docstring), None until it is measured."""
    from linscale_jax.eval.runner import read_results
    from linscale_jax.study import files

    wd, step, task = run.workdir, int(run.steps), "val_loss"
    if estimator == "cooldown":
        wd = os.path.join(run.workdir, files.COOLDOWNS, str(step))
        step = None  # the branch's own last step
    elif estimator == "val_loss_avg":
        task = "val_loss_avg"
    rows = [r for r in read_results(wd) if r.get("task") == task and (step is None or int(r["step"]) == step)]
    if not rows:
        return None
    return float(max(rows, key=lambda r: int(r["step"]))["val_loss"])


def _mean(xs: list) -> float | None:
    """The mean of every seed's loss, None until each is measured."""
    return None if not xs or any(x is None for x in xs) else float(np.mean(xs))


def by_rung(fc: dict, runs):
    """(arch, rung, its runs: one per seed trained or planned) for every rung of fc, in fc's order."""
    mine: dict = {}
    for r in runs:
        mine.setdefault((r.arch, r.size), []).append(r)
    for arch, p in fc["archs"].items():
        for g in p["rungs"]:
            yield arch, g, mine.get((arch, g["size"]), [])


def rows_of(fc: dict, runs, estimator: str) -> list[dict]:
    """COLUMNS per rung of fc (forecast.forecast), actual the mean over the rung's seeds (None until each
    of them is measured), `measured` how many of its `seeds` runs are, and its size and cooldown
    branch's loss (the mean over seeds; None under the cooldown estimator, or not measured)."""
    out = []
    for arch, g, mine in by_rung(fc, runs):
        loss = [actual_loss(r, estimator) for r in mine]
        cool = [None] if estimator == "cooldown" else [actual_loss(r, "cooldown") for r in mine]
        out.append(dict(arch=arch, size=g["size"], n_params=g["n_params"], tokens=g["tokens"], flops=g["flops"],
                        predicted=g["predicted"], ci_low=g["ci_low"], ci_high=g["ci_high"], actual=_mean(loss),
                        predicted_optimum=g["predicted_optimum"], cooldown=_mean(cool), seeds=len(mine),
                        measured=sum(x is not None for x in loss)))
    return out


def _cell(x) -> str:
    if x is None:
        return ""
    if isinstance(x, bool):
        return "true" if x else "false"
    return f"{x:.8g}" if isinstance(x, float) and abs(x) >= 100 else f"{x:.5f}" if isinstance(x, float) else str(x)


def write_csv(rows: list[dict], path: str) -> None:
    """P/prediction.csv: COLUMNS; an empty cell is no interval or no measurement yet."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([_cell(r[c]) for c in COLUMNS])


def _wins(opt: dict, others: list[dict], seed_sd, margin: float, rng, seeds: int = 1) -> dict:
    from linscale_jax.study.scaling.verdicts import outcome

    by = {}
    for o in others:
        if opt["actual"] is None or o["actual"] is None:
            by[o["size"]] = dict(verdict="not measured", diff=None)
            continue
        d = opt["actual"] - o["actual"]
        sig = seed_sd.draws(rng, 4000)
        res = outcome(d + np.sqrt(2 / seeds) * sig * rng.standard_normal(len(sig)), margin)
        by[o["size"]] = dict(res, diff=float(d))
    heads = [v["verdict"] for v in by.values()]
    if any(h == "worse" for h in heads):  # a neighbour measured lower beyond doubt: the others cannot undo it
        verdict = "loses"
    elif "not measured" in heads:
        verdict = "not measured"
    elif all(h == "better" for h in heads):
        verdict = "wins"
    elif all(h == "equivalent" for h in heads):
        verdict = "equivalent"
    else:
        verdict = "not resolved"
    measured = [r for r in [opt, *others] if r["actual"] is not None]
    lowest = min(measured, key=lambda r: r["actual"])["size"] if len(measured) >= 2 else None
    return dict(verdict=verdict, by_neighbour=by, lowest_actual=lowest)


def judge(fc: dict, rows: list[dict], seed_sd, margin: float, target: float, seed: int = 0, seeds: int = 1) -> dict:
    """{arch: {"size", "error", "within", "inside", "met", "wins"}, "summary": {...}} (module docstring);
    `seeds`: the runs each rung's actual is the mean of."""
    rng = np.random.default_rng(seed)
    out = {}
    for arch in fc["archs"]:
        mine = [r for r in rows if r["arch"] == arch]
        opt = next(r for r in mine if r["predicted_optimum"])
        others = [r for r in mine if not r["predicted_optimum"]]
        if opt["actual"] is None:
            out[arch] = dict(size=opt["size"], error=None, within=None, inside=None, met=None,
                             wins=_wins(opt, others, seed_sd, margin, rng, seeds))
            continue
        err = opt["actual"] - opt["predicted"]
        inside = None if opt["ci_low"] is None else bool(opt["ci_low"] <= opt["actual"] <= opt["ci_high"])
        within = bool(abs(err) <= target)
        out[arch] = dict(size=opt["size"], error=float(err), within=within, inside=inside,
                         met=bool(within and inside), wins=_wins(opt, others, seed_sd, margin, rng, seeds))
    judged = [v for v in out.values() if v["met"] is not None]
    met = sum(v["met"] for v in judged)
    left = OF_ARCHS - len(judged)  # archs not measured: each could still meet it
    if left <= 0:
        ok = met >= TARGET_ARCHS * len(judged) / OF_ARCHS
        overall = f"{'met' if ok else 'not met'}: {met} of {len(judged)} archs"
    elif met >= TARGET_ARCHS:
        overall = f"met: {met} of {len(judged)} measured archs, whatever the other {left} give"
    elif met + left < TARGET_ARCHS:
        overall = (f"not met: {met} of {len(judged)} measured archs, so at most {met + left} of {OF_ARCHS} "
                   f"(the target counts {TARGET_ARCHS})")
    else:
        overall = (f"not judged: {len(judged)} arch(s) measured, the target counts {TARGET_ARCHS} of {OF_ARCHS}"
                   + (f" ({met} of {len(judged)} met so far)" if judged else ""))
    return dict(archs=out, summary=dict(measured=len(judged), met=met, overall=overall, target=target,
                                        margin=margin, chance=chance(fc)))


def at_least(p: list[float], k: int) -> float:
    """P(at least k of independent events with probabilities p occur) (the Poisson binomial)."""
    dist = np.zeros(len(p) + 1)
    dist[0] = 1.0
    for q in p:
        dist[1:] = dist[1:] * (1 - q) + dist[:-1] * q
        dist[0] *= 1 - q
    return float(dist[k:].sum())


def chance(fc: dict) -> dict | None:
    """{"archs": {arch: p_met of N_opt}, "needed", "overall": P(at least `needed` archs meet it)}: what the
    prediction's own draws give the target before anything trains (independent archs); None for a
    prediction stored without p_met."""
    p = {a: next((g.get("p_met") for g in v.get("rungs", []) if g["predicted_optimum"]), None)
         for a, v in fc["archs"].items()}
    if not p or any(x is None for x in p.values()):
        return None
    need = int(np.ceil(TARGET_ARCHS * len(p) / OF_ARCHS))
    return dict(archs=p, needed=need, overall=at_least(list(p.values()), need))
