"""The prediction, made and written before anything trains: per arch, N_opt at a compute beyond the
ladder and the law's loss for it and its two neighbours, with 95% intervals.

    fc = forecast(study, lad, P)     # P/predictions.json (each arch's reused while study's settings hold)
    fc["archs"][arch]["rungs"]       # three rows: the neighbour below, N_opt, the neighbour above

The compute C is study.compute_factor × the ladder's largest run (Table-1 FLOPs, the fit tables'
accounting). Per arch: the law of study.form with its refits (fit.holdout.law_draws) on the laws'
estimator and count: approach 3's additive E + A/N^α + B/D^β, Kaplan's joint E + ((A/N)^(α/β) + B/D)^β
(fit.kaplan), or (auto) the one of the two that misses the ladder's own sizes least
(fit.holdout.choose_form); N_opt is the size of the ladder's shape (ladder.Ladder.family) that the law puts lowest at C
(fit.prediction.optimum; its interval from each refit's own choice); each rung trains D = C / its
Table-1 FLOPs per token (rounded up to whole steps of its batch) under the ladder's protocol
(protocol.rung_config), and its predicted loss is the law's at the loss point of the laws' estimator
(protocol.point_tokens: the last step, or for cooldown the end of the branch off it), with the
interval for an observed run, or for the mean of study.seeds runs (the refits, a seed offset and
checkpoint noise), and p_met: the share of those draws that would meet the check (within study.target
of the prediction and inside the interval).
"""

from __future__ import annotations

import json
import os

import numpy as np

from linscale_jax.contract import split_list
from linscale_jax.fit.table import FitError
from linscale_jax.study.predict import protocol
from linscale_jax.study.predict.ladder import PredictError, _load_json

PREDICTIONS_JSON = "predictions.json"


def settings(study, lad) -> dict:
    """What a prediction depends on: a stored arch's is reused while these hold (archs aside: the archs
    predicted so far)."""
    return dict(ladder_from=os.path.abspath(lad.workdir), ladder_preset=str(study.ladder_preset),
                estimator=lad.estimator, compute_factor=float(study.compute_factor), bootstrap=int(study.bootstrap), seed=int(study.seed),
                rule=str(study.rule), seeds=seeds_of(study), form=str(study.get("form", "additive")),
                target=float(study.target), completed=completed_as(lad),
                archs=archs_of(study, lad))


def completed_as(lad) -> str:
    """How the ladder was completed (top_up): its replicates and the runs added, "" when it was not."""
    if not lad.source:
        return ""
    return (f"{lad.source}: replicates.sizes={lad.study.replicates.sizes}, seeds={int(lad.study.replicates.seeds)}, "
            f"{len(lad.added)} run(s) added")


def _same(a: dict, b: dict) -> bool:
    def key(s):
        return dict({k: v for k, v in s.items() if k != "archs"}, seeds=s.get("seeds", 1), form=s.get("form", "additive"),
                    target=s.get("target"), completed=s.get("completed", ""))

    return key(a) == key(b)


def seeds_of(study) -> int:
    """study.seeds: the init seeds each rung trains at (>= 1)."""
    k = study.get("seeds", 1)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise PredictError(f"study.seeds={k!r}: the init seeds per rung must be a whole number >= 1 (1: one run per "
                           "rung; 2 halves the seed variance of the check's actual)")
    return k


def archs_of(study, lad) -> list[str]:
    """study.archs ("": every arch of the ladder); an arch the ladder lacks is refused."""
    want = split_list(str(study.get("archs", "") or ""), "study.archs") if str(study.get("archs", "")) else lad.archs
    missing = [a for a in want if a not in lad.archs]
    if missing:
        raise PredictError(f"{', '.join(missing)} is not an arch of the ladder {lad.workdir} (its archs: "
                           f"{', '.join(lad.archs)}); pass --config.archs= a subset of those")
    return want


def compute(study, lad) -> float:
    f = float(study.compute_factor)
    if not f > 1:
        raise PredictError(f"study.compute_factor={f:g}: a prediction beyond the ladder needs a compute above its "
                           "largest run's; pass a factor > 1 (4 by default)")
    return f * float(lad.largest.flops)


def _point_ratio(lad) -> float:
    """The loss point's tokens over the trained tokens (1, or 1 + the cooldown's fraction)."""
    return 1.0 + float(lad.study.cooldown.fraction) if lad.estimator == "cooldown" else 1.0


def predict_arch(study, lad, arch: str, c: float) -> dict:
    """One arch's prediction (module docstring) as data."""
    from linscale_jax.fit import holdout, prediction

    curves = lad.curves(arch)
    rng = np.random.default_rng(int(study.seed))
    try:
        form, form_rms = holdout.choose_form(curves, arch, str(study.get("form", "additive")))
    except FitError as e:
        raise PredictError(f"study.form: {e}") from None
    ld = holdout.law_draws(curves, arch, rng, n_boot=int(study.bootstrap), seed_sd=lad.seed_sd(), form=form)
    fam = lad.family(arch)
    law_rungs = [dict(n_params=f["n_law"], flops_per_token=f["flops_per_token"]) for f in fam]
    at = c * _point_ratio(lad)
    opt = prediction.optimum(ld, law_rungs, at)
    i = opt["index"]
    if i in (0, len(fam) - 1):
        raise PredictError(
            f"{arch}: the law puts N_opt at {fam[i]['size']}, the {'smallest' if i == 0 else 'largest'} size of the "
            f"ladder's shape ({fam[i]['layers']} layers, the largest size's head dim) in linscale_jax/models/sizes.py "
            "LADDER, so the optimum may lie beyond it and a rung on each side cannot be built; add sizes of that "
            "shape to LADDER, pass another --config.compute_factor, or leave the arch out (--config.archs)")
    chosen = fam[i - 1:i + 2]
    runs, notes = [], []
    for f in chosen:
        cfg, note = protocol.rung_config(lad, arch, f["size"], c / f["flops_per_token"], str(study.rule))
        runs.append(cfg)
        notes.append(note)
    pts = [protocol.point_tokens(lad, cfg) for cfg in runs]
    rows = prediction.at_tokens(ld, [dict(n_params=f["n_law"], flops_per_token=f["flops_per_token"]) for f in chosen],
                                pts, rng, replicates=seeds_of(study), target=float(study.target))
    rungs = []
    for j, (f, cfg, note, r) in enumerate(zip(chosen, runs, notes, rows)):
        rungs.append(dict(size=f["size"], name=str(cfg.name), n_params=f["n_params"], n_law=f["n_law"],
                          flops_per_token=f["flops_per_token"], budget_tokens=c / f["flops_per_token"],
                          steps=int(cfg.train.steps), batch_size=int(cfg.train.batch_size), lr=float(cfg.optim.lr),
                          tokens=r["tokens"], flops=r["flops"], predicted=r["predicted"], ci_low=r["ci_low"],
                          ci_high=r["ci_high"], p_met=r["p_met"], predicted_optimum=j == 1, rule=note))
    return dict(law=ld.law, form_rms=form_rms, failed=ld.failed, resid_sd=ld.resid_sd, sizes_fitted=ld.n_sizes, optimum=opt,
                family=[dict(size=f["size"], n_params=f["n_params"], n_law=f["n_law"],
                             predicted=float(ld.point.predict(f["n_law"], at / f["flops_per_token"]))) for f in fam],
                rungs=rungs)


def _same_rates(study, lad, old: dict) -> bool:
    """Whether every stored rung would train at the rates its record names (protocol.rung_config's note):
    a rule file or its continuation changed since makes the record again, and a rung trained at the old
    rates is then refused by its checkpoint's config (scaling.runner.check_config)."""
    archs = old.get("archs")
    for arch, p in (archs.items() if isinstance(archs, dict) else ()):
        for g in p.get("rungs", []) if isinstance(p, dict) else []:
            if not (isinstance(g, dict) and arch in lad.archs and "size" in g and "budget_tokens" in g):
                return False  # a record of another shape: made again
            _, note = protocol.rung_config(lad, arch, g["size"], g["budget_tokens"], str(study.rule))
            if json.loads(json.dumps(note)) != g.get("rule"):
                return False
    return True


def forecast(study, lad, workdir: str) -> dict:
    """P/predictions.json (module docstring) for study's archs: an arch predicted before under the same
    settings and rates (_same_rates) is read back, never made again (the record written before its rungs trained); an arch
    added later is predicted (its draws are seeded per arch, so alone or together gives the same) and
    appended to the file."""
    path = os.path.join(workdir, PREDICTIONS_JSON)
    want = settings(study, lad)
    out = None
    if os.path.exists(path):
        old = _load_json(path, "delete it to make the prediction again (it is the record written "
                         "before the rungs trained)")
        if _same(old.get("settings", {}), want) and _same_rates(study, lad, old):
            out = old
    if out is None:
        big = lad.largest
        out = dict(settings=dict(want, archs=[]), compute=compute(study, lad),
                   ladder=dict(workdir=lad.workdir, source=lad.source, added=list(lad.added), estimator=lad.estimator, count=lad.count,
                               largest=dict(name=big.name, flops=float(big.flops)), seed_sd=lad.seed_sd().json(),
                               margin=lad.margin()), archs={})
    new = [a for a in want["archs"] if a not in out["archs"]]
    if new:
        out["archs"].update({a: predict_arch(study, lad, a, out["compute"]) for a in new})
        out["settings"]["archs"] = list(out["archs"])
        os.makedirs(workdir, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(out, f, indent=2)
        os.replace(path + ".tmp", path)
    return dict(out, archs={a: out["archs"][a] for a in want["archs"]})
