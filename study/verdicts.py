"""The paper's findings judged from a checkpoint table, with verdicts that can fail.

    python -m study.verdicts --table=FILE [--table=NAME=FILE ...] [--recall=FILE] [--margin=M]
                             [--tolerance=T] [--seed_sd=S] [--bootstrap=B] [--min_step=K] [--json]

FILE is a table in the contract's columns (linscale_jax.contract.TABLE_COLUMNS, as `eval.export`
writes; a `seed` column may be present): one row per (run, checkpoint), `loss` the estimator
judged. Several --table flags judge several loss estimators of the same runs (e.g.
val_loss=fit/table.csv cooldown=fit/table_cooldown.csv); every finding is then stated per
estimator, and where they disagree its verdict is "depends on the estimator". The study's report
and DIR/findings.json come from `judge_all` below.

Noise model of one run's curve (what the intervals resample; `draw_table`):
  runs      the sizes of an arch are resampled with replacement (whole curves);
  seeds     runs of one arch and size are seed replicates; their curves are averaged, and every
            resampled size gets a per-run offset ~ N(0, seed_sd² / replicates). seed_sd is the sd of
            the replicates' late-checkpoint mean, pooled over the arch's replicated sizes; an arch
            without replicates uses `seed_sd` given (the verdict says "assumed");
  checkpoints  the residuals of each curve around its quadratic trend in ln C are resampled.
Then each arch's approach-1 law L(C) (the paper's: the envelope's power law) is refitted.

Four outcomes per linear arch (finding 2; arch − baseline at the largest common compute C*):
  equivalent    the 90% interval lies inside (−margin, +margin) (TOST, Schuirmann 1987);
  better        otherwise, the 95% interval lies below 0;  worse: above 0;
  not_resolved  everything else, and any comparison whose bootstrap failed on more than half of its
                resamples ("no interval").
Finding 2 is reproduced when every linear arch is better or equivalent; not reproduced when any is
worse; not resolved otherwise.
Finding 1 per arch: the L(C) exponent's 95% interval lies below 0 and the law fitted without the
largest size predicts that size's final loss within ±tolerance (90% interval of actual − predicted
inside it): holds; the exponent interval above 0, or the error's 95% interval outside ±tolerance:
fails; else not_resolved (also when fewer than 3 smaller sizes leave no held-out check).
Finding 3 (retrieval) comes from a recall study's recall.csv (study.findings.retrieval).
"""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np

from linscale_jax.contract import BASELINE_ARCH, TABLE_COLUMNS

DEFAULT_MARGIN = 0.05  # nats: differences inside ±0.05 (≈2.5% of the study's losses) count as equal
DEFAULT_TOLERANCE = 0.1  # nats: a held-out final loss within ±0.1 of the prediction (≈5%)
MAX_FAILED = 0.5  # more failed resamples than this share: "no interval"
OUTCOMES = ("better", "worse", "equivalent", "not_resolved")


def linear_archs() -> tuple[str, ...]:
    from linscale_jax.models import registry

    return registry.linear_archs()


# ---- the noise model ----------------------------------------------------------------------------

@dataclasses.dataclass
class Size:
    """One (arch, n_params): its replicate runs' curves on their common steps."""
    n_params: float
    flops: np.ndarray  # [k]
    tokens: np.ndarray  # [k]
    loss: np.ndarray  # [seeds, k]

    @property
    def mean(self) -> np.ndarray:
        return self.loss.mean(axis=0)

    def trend(self) -> tuple[np.ndarray, np.ndarray]:
        """(quadratic trend in ln C of the mean curve, residuals); residuals 0 below 4 points."""
        y = self.mean
        if len(y) < 4:
            return y.copy(), np.zeros_like(y)
        x = np.log(self.flops)
        t = np.polyval(np.polyfit(x, y, 2), x)
        return t, y - t


def sizes_of(sub) -> list[Size]:
    """One arch's table -> its sizes (ascending), replicates on their common steps."""
    out = []
    for n in np.unique(sub.n_params):
        at = sub.take(sub.n_params == n)
        runs = sorted(set(at.run.tolist()))
        steps = sorted(set.intersection(*(set(at.step[at.run == r].tolist()) for r in runs)))
        loss, fl, tk = [], None, None
        for r in runs:
            rr = at.take(at.run == r)
            idx = [int(np.flatnonzero(rr.step == s)[0]) for s in steps]
            loss.append(rr.loss[idx])
            fl, tk = rr.flops[idx], rr.tokens[idx]
        out.append(Size(float(n), np.asarray(fl, float), np.asarray(tk, float), np.asarray(loss, float)))
    return out


def seed_sd_of(sizes: list[Size]) -> tuple[float, int]:
    """(pooled sd over seeds of each replicate's mean over the second half of its checkpoints,
    number of replicated sizes); (nan, 0) without replicates."""
    var = []
    for s in sizes:
        if s.loss.shape[0] >= 2:
            late = s.loss[:, s.loss.shape[1] // 2:].mean(axis=1)
            var.append(np.var(late, ddof=1))
    return (float(np.sqrt(np.mean(var))), len(var)) if var else (float("nan"), 0)


def _table(arch: str, curves) -> "object":
    """A fit.table.Table from [(n_params, flops, tokens, loss)], one run per entry."""
    from fit.table import Table

    cols = {k: [] for k in TABLE_COLUMNS}
    for j, (n, fl, tk, ls) in enumerate(curves):
        k = len(ls)
        cols["arch"] += [arch] * k
        cols["run"] += [f"{arch}#{j}"] * k
        cols["step"] += list(range(k))
        cols["n_params"] += [n] * k
        cols["tokens"] += list(tk)
        cols["flops"] += list(fl)
        cols["loss"] += list(ls)
    return Table(**{c: (np.asarray(v, dtype=object) if c in ("arch", "run") else np.asarray(v, float))
                    for c, v in cols.items()})


def draw_curves(arch: str, sizes: list[Size], sd: float, rng, keep=None):
    """One resample (module docstring): sizes drawn with replacement (`keep`: indices always kept,
    e.g. a held-out size), a per-run seed offset, checkpoint residuals resampled."""
    picks = list(rng.integers(0, len(sizes), len(sizes))) if keep is None else keep
    curves = []
    for i in picks:
        s = sizes[i]
        t, r = s.trend()
        y = t + r[rng.integers(0, len(r), len(r))] if len(r) >= 4 else s.mean.copy()
        if sd > 0:
            y = y + rng.normal(0.0, sd / np.sqrt(s.loss.shape[0]))
        curves.append((s.n_params, s.flops, s.tokens, np.maximum(y, 1e-6)))
    return curves


def law_of(arch: str, curves):
    from fit import approach1

    return approach1.fit(_table(arch, curves), include_clamped=True).laws["L_C"]


def common_compute(sizes_by_arch: dict) -> float:
    """The largest compute every arch reaches with >= 2 sizes (the end of its second-largest)."""
    ends = []
    for sizes in sizes_by_arch.values():
        e = sorted(float(s.flops[-1]) for s in sizes)
        ends.append(e[-2] if len(e) >= 2 else e[-1])
    return min(ends)


# ---- outcomes -----------------------------------------------------------------------------------

def outcome(draws, margin: float) -> dict:
    """{"ci_low", "ci_high" (95%), "ci90_low", "ci90_high", "verdict"} of a difference's draws."""
    d = np.asarray(draws, float)
    d = d[np.isfinite(d)]
    lo, hi, lo90, hi90 = np.percentile(d, [2.5, 97.5, 5, 95])
    if -margin < lo90 and hi90 < margin:
        v = "equivalent"
    elif hi < 0:
        v = "better"
    elif lo > 0:
        v = "worse"
    else:
        v = "not_resolved"
    return dict(ci_low=float(lo), ci_high=float(hi), ci90_low=float(lo90), ci90_high=float(hi90), verdict=v)


def _no_interval(n_failed: int, n: int, err: str | None) -> dict:
    return dict(ci_low=None, ci_high=None, ci90_low=None, ci90_high=None, verdict="not_resolved",
                note=f"no interval: {n_failed} of {n} resamples failed ({err})")


# ---- the findings -------------------------------------------------------------------------------

def judge(table, *, margin: float = DEFAULT_MARGIN, tolerance: float = DEFAULT_TOLERANCE,
          seed_sd: float | None = None, n_boot: int = 200, seed: int = 0, holdout: bool = True,
          baseline: str = BASELINE_ARCH, linear: tuple | None = None) -> dict:
    """Findings 1 and 2 of one table (one loss estimator); see the module docstring."""
    from fit.table import FitError

    linear = linear_archs() if linear is None else linear
    sizes = {a: sizes_of(table.select(a)) for a in table.archs}
    sds = {}
    for a, s in sizes.items():
        sd, n = seed_sd_of(s)
        sds[a] = (dict(sd=sd, source=f"measured: {n} replicated size(s)") if n else
                  dict(sd=float(seed_sd or 0.0), source="assumed (no replicates in the table)"
                       if seed_sd else "none: no replicates and no seed_sd given"))
    rng = np.random.default_rng(seed)
    out = dict(margin=margin, tolerance=tolerance, n_boot=n_boot, seed_sd=sds, baseline=baseline)
    # finding 2 ---------------------------------------------------------------------------------
    # a variant label (`cosformer2+tpe=none`, models.sizes.split_variant) is judged as its arch
    judged = [a for a in table.archs if a.split("+", 1)[0] in linear]
    out["not_judged"] = [a for a in table.archs if a != baseline and a not in judged]
    eq = dict(verdict="not measured", archs={})
    if baseline in sizes and judged:
        c_star = common_compute({a: sizes[a] for a in [baseline, *judged]})
        eq["compute"] = c_star
        point, draws, fails = {}, {}, {}
        for a in [baseline, *judged]:
            try:
                point[a] = float(law_of(a, [(s.n_params, s.flops, s.tokens, s.mean) for s in sizes[a]])(c_star))
            except FitError as e:
                fails[a] = str(e)
                continue
            vals, nf, err = [], 0, None
            for _ in range(n_boot):
                try:
                    vals.append(float(law_of(a, draw_curves(a, sizes[a], sds[a]["sd"], rng))(c_star)))
                except FitError as e:
                    nf, err = nf + 1, err or str(e)
                    vals.append(np.nan)
            draws[a] = (np.asarray(vals), nf, err)
        for a in judged:
            if a in fails or baseline in fails:
                eq["archs"][a] = dict(diff=None, **_no_interval(n_boot, n_boot, fails.get(a) or fails[baseline]))
                continue
            d = draws[a][0] - draws[baseline][0]
            nf = int(np.sum(~np.isfinite(d)))
            diff = point[a] - point[baseline]
            eq["archs"][a] = dict(diff=diff, **(outcome(d, margin) if nf <= MAX_FAILED * n_boot else
                                                _no_interval(nf, n_boot, draws[a][2] or draws[baseline][2])),
                                  n_failed=nf, loss=point[a], baseline_loss=point[baseline])
        vs = [r["verdict"] for r in eq["archs"].values()]
        eq["verdict"] = ("reproduced" if all(v in ("better", "equivalent") for v in vs) else
                         "not reproduced" if "worse" in vs else "not resolved")
    out["equal_compute"] = eq
    # finding 1 ---------------------------------------------------------------------------------
    out["power_laws"] = power_laws(sizes, sds, tolerance, n_boot, seed) if holdout else \
        dict(verdict="not measured", archs={})
    return out


def power_laws(sizes: dict, sds: dict, tolerance: float, n_boot: int, seed: int) -> dict:
    from fit.table import FitError

    rng = np.random.default_rng([seed, 1])
    res = {}
    for a, ss in sizes.items():
        r = dict(verdict="not_resolved")
        try:
            law = law_of(a, [(s.n_params, s.flops, s.tokens, s.mean) for s in ss])
            r["exponent"] = float(law.exponent)
        except FitError as e:
            res[a] = dict(verdict="not_resolved", note=f"no law: {e}")
            continue
        small, big = ss[:-1], ss[-1]
        exps, errs, nf, err_msg = [], [], 0, None
        has_holdout = len(small) >= 3
        for _ in range(n_boot):
            try:
                exps.append(float(law_of(a, draw_curves(a, ss, sds[a]["sd"], rng)).exponent))
                if has_holdout:
                    cur = draw_curves(a, small, sds[a]["sd"], rng)
                    held = draw_curves(a, [big], sds[a]["sd"], rng, keep=[0])[0]
                    errs.append(float(held[3][-1] - law_of(a, cur)(held[1][-1])))
            except FitError as e:
                nf, err_msg = nf + 1, err_msg or str(e)
        if nf > MAX_FAILED * n_boot:
            res[a] = dict(r, note=f"no interval: {nf} of {n_boot} resamples failed ({err_msg})")
            continue
        lo, hi = np.percentile(exps, [2.5, 97.5])
        r["exponent_ci"] = [float(lo), float(hi)]
        if has_holdout:
            try:
                pred = float(law_of(a, [(s.n_params, s.flops, s.tokens, s.mean) for s in small])(big.flops[-1]))
            except FitError as e:
                pred, r["note"] = float("nan"), f"no held-out law: {e}"
            if np.isfinite(pred):
                e_lo, e_hi, e_lo90, e_hi90 = np.percentile(errs, [2.5, 97.5, 5, 95])
                r["holdout"] = dict(n_params=big.n_params, predicted=pred, actual=float(big.mean[-1]),
                                    diff=float(big.mean[-1] - pred), ci_low=float(e_lo),
                                    ci_high=float(e_hi), ci90_low=float(e_lo90), ci90_high=float(e_hi90))
        else:
            r["note"] = f"no held-out check: {len(small)} size(s) below the largest (needs 3)"
        h = r.get("holdout")
        if hi >= 0 and lo > 0 or (h and (h["ci_low"] > tolerance or h["ci_high"] < -tolerance)):
            r["verdict"] = "fails"
        elif hi < 0 and h and -tolerance < h["ci90_low"] and h["ci90_high"] < tolerance:
            r["verdict"] = "holds"
        res[a] = r
    vs = [r["verdict"] for r in res.values()]
    verdict = ("reproduced" if vs and all(v == "holds" for v in vs) else
               "not reproduced" if "fails" in vs else "not resolved")
    return dict(verdict=verdict, archs=res, tolerance=tolerance)


def combine(verdicts: dict) -> str:
    """One verdict from {estimator: verdict}: the common one, else 'depends on the estimator'."""
    vals = set(verdicts.values())
    return vals.pop() if len(vals) == 1 else "depends on the estimator"


def judge_all(tables: dict, recall_rows=None, recall_source: str = "", **kw) -> dict:
    """{estimator: Table} -> the findings JSON: per finding `verdict` (combined over estimators),
    `by_estimator`, and per arch the first estimator's numbers with the combined verdict."""
    from study import findings

    per = {name: judge(t, **kw) for name, t in tables.items()}
    first = next(iter(per))
    out = dict(estimators=list(per), margin=per[first]["margin"], tolerance=per[first]["tolerance"],
               findings={}, by_estimator=per)
    for key in ("power_laws", "equal_compute"):
        f = dict(verdict=combine({n: p[key]["verdict"] for n, p in per.items()}),
                 by_estimator={n: p[key]["verdict"] for n, p in per.items()}, archs={})
        for a in per[first][key]["archs"]:
            rows = {n: p[key]["archs"].get(a, {}) for n, p in per.items()}
            f["archs"][a] = dict(rows[first], verdict=combine({n: r.get("verdict") for n, r in rows.items()}),
                                 by_estimator={n: {k: r.get(k) for k in ("diff", "ci_low", "ci_high", "verdict")}
                                               for n, r in rows.items()})
        if "compute" in per[first][key]:
            f["compute"] = per[first][key]["compute"]
        out["findings"][key] = f
    v3, lines = findings.retrieval(recall_rows, recall_source)
    out["findings"]["retrieval"] = dict(verdict=v3.replace("**", ""), archs={})
    out["retrieval_lines"] = lines
    return out


def load_tables(specs: list[str], min_step: float = 0.0, unit: str = "pf-days") -> dict:
    """['FILE' or 'NAME=FILE', ...] -> {name: Table} (rows with step >= min_step, C in `unit`)."""
    from fit.table import load

    out = {}
    for i, spec in enumerate(specs):
        name, path = spec.split("=", 1) if "=" in spec else (f"table{i + 1}" if len(specs) > 1 else "loss", spec)
        t = load(path).with_compute_unit(unit)
        out[name] = t.take(t.step >= min_step)
    return out


def text(result: dict) -> str:
    """A plain-text rendering of judge_all's JSON."""
    L = [f"estimators: {', '.join(result['estimators'])}; margin ±{result['margin']:g} nats (equivalence), "
         f"held-out tolerance ±{result['tolerance']:g} nats"]
    for key, f in result["findings"].items():
        L.append(f"{key}: {f['verdict']}" + (f"  (by estimator: {f['by_estimator']})" if "by_estimator" in f
                                              and len(result["estimators"]) > 1 else ""))
        for a, r in f["archs"].items():
            cells = []
            for n, e in r.get("by_estimator", {}).items():
                if e.get("diff") is None:
                    cells.append(f"{n}: {e['verdict']}")
                else:
                    ci = "no interval" if e["ci_low"] is None else f"[{e['ci_low']:+.3f}, {e['ci_high']:+.3f}]"
                    cells.append(f"{n}: {e['diff']:+.3f} {ci} {e['verdict']}")
            L.append(f"  {a}: {r['verdict']}" + (f"  ({'; '.join(cells)})" if cells else ""))
    return "\n".join(L)


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m study.verdicts", description=__doc__.split("\n")[0])
    p.add_argument("--table", action="append", required=True,
                   help="checkpoint table CSV, or NAME=FILE (repeat for several loss estimators)")
    p.add_argument("--recall", default="", help="a recall study's recall.csv (finding 3)")
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="equivalence margin, nats")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="held-out tolerance, nats")
    p.add_argument("--seed_sd", type=float, default=None,
                   help="seed-to-seed sd (nats) for archs without replicate runs in the table")
    p.add_argument("--bootstrap", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min_step", type=float, default=0.0, help="ignore checkpoints before this step")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    from fit.table import FitError
    from study import findings

    try:
        tables = load_tables(a.table, a.min_step)
        recall = findings.read_recall(a.recall) if a.recall else None
        res = judge_all(tables, recall, a.recall, margin=a.margin, tolerance=a.tolerance, seed_sd=a.seed_sd,
                        n_boot=a.bootstrap, seed=a.seed)
    except (FitError, FileNotFoundError, ValueError) as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 1
    print(json.dumps(res["findings"], indent=2) if a.json else text(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
