"""The prediction's error along each rung's tokens: where the law's miss at the loss point comes from.

    rows = along.rows_of(fc, runs, estimator, seen)   # one row per rung checkpoint
    along.write_csv(rows, P/prediction_curves.csv)
    table = along.summary(rows, seen)                 # per rung: error at 1/4, 1/2, the end, and at the ladder's D

A rung trains D = C / its FLOPs per token; under a per-checkpoint estimator (val_loss, val_loss_avg)
every checkpoint is a point (D_i, loss_i) of the same N. Its error against the law's point fit,
actual − the law at (N, D_i), split the miss at the loss point in two: at a size the ladder trained,
up to that ladder run's tokens (`seen`) the law interpolates, beyond them it extrapolates along D
alone; at a size beyond the ladder's N it extrapolates along both. The actual is the mean over the
rung's seeds at their common checkpoints (a seed not yet measured leaves the rung out).
"""

from __future__ import annotations

import csv

import numpy as np

from linscale_jax.study.predict.outcome import by_rung

COLUMNS = ("arch", "size", "n_params", "tokens", "actual", "predicted", "error")
TASKS = ("val_loss", "val_loss_avg")  # the estimators measured at every checkpoint


def path_of(run, task: str) -> dict[int, tuple[float, float]]:
    """{step: (tokens, loss)} of the run's checkpoints under `task` (val_loss or val_loss_avg)."""
    from linscale_jax.eval.runner import read_results

    out = {}
    for r in read_results(run.workdir):
        if r.get("task") == task and "tokens" in r:
            out[int(r["step"])] = (float(r["tokens"]), float(r["val_loss"]))
    return out


def _law(w: dict, n: float, d: np.ndarray) -> np.ndarray:
    """The point law (forecast's `law`: E, A, B, alpha, beta and its form) at n and d [k]."""
    from linscale_jax.fit.holdout import FORMS

    return FORMS[w.get("form", "additive")].loss(w["E"], w["A"], w["B"], w["alpha"], w["beta"], n, d)


def rows_of(fc: dict, runs, estimator: str) -> list[dict]:
    """COLUMNS per checkpoint of every rung whose seeds are all measured to their last step; [] under
    an estimator measured once per run (cooldown)."""
    if estimator not in TASKS:
        return []
    out = []
    for arch, g, mine in by_rung(fc, runs):
        paths = [path_of(r, estimator) for r in mine]
        if not paths or any(int(r.steps) not in q for r, q in zip(mine, paths)):
            continue
        steps = sorted(set.intersection(*(set(q) for q in paths)))
        d = np.array([paths[0][s][0] for s in steps])
        loss = np.array([[q[s][1] for s in steps] for q in paths]).mean(axis=0)
        pred = _law(fc["archs"][arch]["law"], g["n_law"], d)
        out += [dict(arch=arch, size=g["size"], n_params=g["n_law"], tokens=float(t), actual=float(a),
                     predicted=float(b), error=float(a - b)) for t, a, b in zip(d, loss, pred)]
    return out


def write_csv(rows: list[dict], path: str) -> None:
    """P/prediction_curves.csv: COLUMNS, one row per rung checkpoint (the law's N count)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([r[c] if isinstance(r[c], str) else f"{r[c]:.6g}" for c in COLUMNS])


def summary(rows: list[dict], seen: dict) -> list[dict]:
    """Per rung: its error at 1/4, 1/2 and all of its tokens (the checkpoint nearest each share) and, at
    a size the ladder trained, at that ladder run's last tokens (`seen`: {(arch, size): tokens}; None
    beyond the ladder's N, or when the rung's first checkpoint lies past them)."""
    by: dict = {}
    for r in rows:
        by.setdefault((r["arch"], r["size"]), []).append(r)
    out = []
    for (arch, size), rs in by.items():
        d = np.array([r["tokens"] for r in rs])
        e = np.array([r["error"] for r in rs])

        def at(t):  # the checkpoint nearest to t tokens (in log tokens)
            return float(e[int(np.argmin(np.abs(np.log(d / t))))])
        lad = seen.get((arch, size))
        out.append(dict(arch=arch, size=size, seen=lad, at_seen=None if lad is None or lad < d[0] else
                        float(np.interp(np.log(lad), np.log(d), e)), quarter=at(d[-1] / 4), half=at(d[-1] / 2),
                        end=float(e[-1])))
    return out


def seen_of(lad, fc: dict) -> dict:
    """{(arch, size): the last tokens of the ladder's run at that size}, for the rungs whose N the ladder
    trained (matched on the law's N count)."""
    out = {}
    for arch, p in fc["archs"].items():
        last = {round(float(c.n_params)): float(c.tokens[-1]) for c in lad.curves(arch)}
        for g in p["rungs"]:
            if round(float(g["n_law"])) in last:
                out[(arch, g["size"])] = last[round(float(g["n_law"]))]
    return out
