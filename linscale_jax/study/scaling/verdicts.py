"""The paper's findings judged from a checkpoint table, with verdicts that can fail.

    python -m linscale_jax.study verdicts --table=FILE [--table=NAME=FILE ...] [--recall=FILE] [--margin=M]
        [--tolerance=T] [--seed_sd=S] [--bootstrap=B] [--min_step=K] [--json]

FILE is a table in the contract's columns (linscale_jax.contract.TABLE_COLUMNS, as `eval.export`
writes; a `seed` column may be present): one row per (run, checkpoint), `loss` the estimator
judged. Several --table flags judge several loss estimators of the same runs; where they disagree
a finding's verdict is "depends on the estimator". The study's DIR/findings.json comes from
`judge_all` (study.results).

Intervals come from B paired draws of the whole study with its sizes fixed
(fit.bootstrap.draw_curves), the seed sd measured from the replicates (per arch, pooled for the
draws, its uncertainty drawn from its scaled inverse-chi-squared), each draw refitting every
arch's approach-1 L(C) (fit.approach1_draws). Four outcomes per linear arch (finding 2, at the
largest common compute C*): equivalent (90% interval inside +-margin), better / worse (95%
interval below / above 0), not_resolved (also "fit unstable" above 10% failed draws); beside it
the measured difference, the minimal detectable effect and the 90% half-width. Finding 1: the
L(C) exponent and the held-out sizes' errors within +-tolerance. Finding 3 reads a recall study's
recall.csv (study.findings.retrieval). The rules in full: docs/study.md "Estimators and verdicts".
"""

from __future__ import annotations

import json

import numpy as np

from linscale_jax.contract import BASELINE_ARCH
from linscale_jax.models.sizes import Variant

DEFAULT_MARGIN = 0.05  # nats: differences inside ±0.05 (≈2.5% of the study's losses) count as equal
DEFAULT_TOLERANCE = 0.1  # nats: a held-out final loss within ±0.1 of the prediction (≈5%)
MAX_FAILED = 0.10  # more failed draws than this share: "not_resolved (fit unstable)"
OUTCOMES = ("better", "worse", "equivalent", "not_resolved")
UNSTABLE = "fit unstable"


def linear_archs() -> tuple[str, ...]:
    from linscale_jax.models import registry

    return registry.linear_archs()


# ---- the study's noise model --------------------------------------------------------------------

def prepare(table, seed_sd: float | None = None, prior=None) -> dict:
    """{"curves": {arch: [Curve]}, "seed_sd": {arch: SeedSd}, "own": SeedSd (pooled over the archs),
    "pooled": SeedSd (the draws': own with `prior`, fit.bootstrap.with_prior), "prior_check", "noise":
    {arch: (residual sd, lag-1 autocorrelation)}, "block": moving-block length} of one table.
    `seed_sd`: assumed when nothing is measured; `prior`: other studies' SeedSd of this protocol."""
    from linscale_jax.fit import bootstrap as bs

    curves = {a: bs.curves_of(table.select(a)) for a in table.archs}
    sds = {a: bs.seed_sd_of(c) for a, c in curves.items()}
    own = bs.pooled(list(sds.values()))
    pool, check = bs.with_prior(own, prior)
    if not pool.df:
        pool = (bs.SeedSd(float(seed_sd), np.inf, "assumed (no replicates in the table)") if seed_sd else
                bs.SeedSd(0.0, 0, "none: no replicates and no seed_sd given"))
    noise = {a: bs.residual_noise(c) for a, c in curves.items()}
    all_curves = [c for cs in curves.values() for c in cs]
    _, rho = bs.residual_noise(all_curves)
    k = max(len(c.flops) for c in all_curves)
    return dict(curves=curves, seed_sd=sds, own=own, pooled=pool, prior_check=check, noise=noise,
                block=bs.block_length(rho, k))


def draw(prep: dict, n: int, rng) -> dict:
    """{arch: [[n, k_i] per size]}: n paired draws of every arch's curves (fit.bootstrap)."""
    return draw_with_sigma(prep, n, rng)[0]


def draw_with_sigma(prep: dict, n: int, rng) -> tuple[dict, np.ndarray]:
    """(draw()'s draws, [n] the seed sd each draw used: the pooled sd's own draws)."""
    from linscale_jax.fit import bootstrap as bs

    sigma = prep["pooled"].draws(rng, n)
    return bs.draw_curves(prep["curves"], {a: sigma for a in prep["curves"]}, n, rng, prep["block"]), sigma


def laws(curves, draws, at, impl: str = "batched"):
    """fit.approach1_draws of one arch: the point fit (one draw: the mean curves) and the draws'."""
    from linscale_jax.fit.approach1_draws import fit_draws

    flops = [c.flops for c in curves]
    n_params = [c.n_params for c in curves]
    point = fit_draws(flops, [c.mean[None] for c in curves], at, n_params=n_params, impl=impl)
    return point, fit_draws(flops, draws, at, n_params=n_params, impl=impl)


def common_compute(curves: dict) -> float:
    """The largest compute every arch reaches with >= 2 sizes (the end of its second-largest)."""
    ends = []
    for cs in curves.values():
        e = sorted(float(c.flops[-1]) for c in cs)
        ends.append(e[-2] if len(e) >= 2 else e[-1])
    return min(ends)


# ---- outcomes -----------------------------------------------------------------------------------

def outcome(draws, margin: float, max_failed: float = MAX_FAILED, seed: tuple | None = None) -> dict:
    """A difference's draws (NaN: a failed fit) -> 95% and 90% intervals, verdict, the failed share,
    the minimal detectable effect at 80% power with the noise model it comes from (fit.power; `seed`:
    ([n] the seed sd of each draw, the measured SeedSd) splits the draws' variance into its checkpoint
    and seed parts), and the 90% half-width (equivalence needs it < margin)."""
    from linscale_jax.fit import power

    d = np.asarray(draws, float)
    failed = float(np.mean(~np.isfinite(d))) if d.size else 1.0
    ok = d[np.isfinite(d)]
    if failed > max_failed or len(ok) < 2:
        return dict(ci_low=None, ci_high=None, ci90_low=None, ci90_high=None, verdict="not_resolved",
                    reason=UNSTABLE, failed=failed, mde=None, power_model=None, halfwidth90=None)
    lo, hi, lo90, hi90 = (float(x) for x in np.percentile(ok, [2.5, 97.5, 5, 95]))
    if -margin < lo90 and hi90 < margin:
        v = "equivalent"
    elif hi < 0:
        v = "better"
    elif lo > 0:
        v = "worse"
    else:
        v = "not_resolved"
    # the 95% interval excludes 0 in 80% of re-runs at δ = MDE, its width varying with their seed sd
    model = power.split(d, *((seed[0], seed[1].sd, seed[1].df) if seed is not None else (None, 0.0, 0.0)),
                        margin=margin)
    return dict(ci_low=lo, ci_high=hi, ci90_low=lo90, ci90_high=hi90, verdict=v, failed=failed,
                mde=power.mde(model), power_model=model.json(), halfwidth90=(hi90 - lo90) / 2)


def _ranking(points: dict, draws: dict, baseline: str) -> dict:
    """best / runner_up / diff [d, lo, hi] / p_best / resolved / vs_llama from per-arch point values
    and paired draws [n] (NaN: failed)."""
    archs = list(points)
    order = sorted(archs, key=lambda a: points[a])
    m = np.stack([draws[a] for a in archs])  # [archs, n]
    ok = np.isfinite(m).all(axis=0)

    def iv(x, point):
        x = x[np.isfinite(x)]
        return [point, *(float(v) for v in np.percentile(x, [2.5, 97.5]))] if len(x) >= 2 else [point, None, None]

    out = dict(by_arch={a: iv(draws[a], points[a]) for a in archs}, best=order[0],
               runner_up=order[1] if len(order) > 1 else None, diff=None, resolved=False,
               failed={a: float(np.mean(~np.isfinite(draws[a]))) for a in archs})
    if len(order) > 1:
        out["diff"] = iv(draws[order[1]] - draws[order[0]], points[order[1]] - points[order[0]])
        out["resolved"] = out["diff"][1] is not None and out["diff"][1] > 0
        out["p_best"] = float(np.mean(np.argmin(m[:, ok], axis=0) == archs.index(order[0]))) if ok.any() else None
    if baseline in archs:
        out["vs_llama"] = {a: iv(draws[a] - draws[baseline], points[a] - points[baseline])
                           for a in archs if a != baseline}
    return out


# ---- the findings -------------------------------------------------------------------------------

def judge(table, *, margin: float = DEFAULT_MARGIN, tolerance: float = DEFAULT_TOLERANCE,
          seed_sd: float | None = None, n_boot: int = 200, seed: int = 0, holdout: bool = True,
          baseline: str = BASELINE_ARCH, linear: tuple | None = None, prior=None) -> dict:
    """Findings 1 and 2 of one table (one loss estimator); see the module docstring. `prior`: other
    studies' SeedSd of this protocol and estimator (prepare)."""
    from linscale_jax.fit.table import FitError

    linear = linear_archs() if linear is None else linear
    prep = prepare(table, seed_sd, prior)
    rng = np.random.default_rng(seed)
    draws, sigma = draw_with_sigma(prep, n_boot, rng)
    seed_of = (sigma, prep["pooled"])
    curves = prep["curves"]
    c_star = common_compute(curves)
    fitted, unfitted = {}, {}
    for a in curves:
        try:
            fitted[a] = laws(curves[a], draws[a], [c_star])
        except FitError as e:  # e.g. fewer than 3 sizes: no envelope
            unfitted[a] = f"no law: {e}"
    out = dict(margin=margin, tolerance=tolerance, n_boot=n_boot, baseline=baseline, compute=c_star,
               seed_sd={a: s.json() for a, s in prep["seed_sd"].items()}, seed_sd_pooled=prep["pooled"].json(),
               seed_sd_own=prep["own"].json(), seed_sd_prior=prep["prior_check"],
               noise={a: dict(ckpt_sd=v[0], rho=v[1]) for a, v in prep["noise"].items()}, block=prep["block"])
    # finding 2 ---------------------------------------------------------------------------------
    # a variant label (`cosformer2+tpe=none`, models.sizes.Variant) is judged as its arch
    judged = [a for a in table.archs if Variant.parse(a).arch in linear]
    out["not_judged"] = [a for a in table.archs if a != baseline and a not in judged]
    eq = dict(verdict="not measured", archs={}, compute=c_star)
    if baseline in curves and judged:
        for a in judged:
            if a in unfitted or baseline in unfitted:
                eq["archs"][a] = dict(diff=None, **outcome([], margin), note=unfitted.get(a) or unfitted[baseline])
                continue
            (pa, da), (pb, db) = fitted[a], fitted[baseline]
            row = dict(diff=float(pa.law_at[0, 0] - pb.law_at[0, 0]),
                       **outcome(da.law_at[:, 0] - db.law_at[:, 0], margin, seed=seed_of),
                       loss=float(pa.law_at[0, 0]), baseline_loss=float(pb.law_at[0, 0]))
            row["measured"] = dict(diff=float(pa.envelope_at[0, 0] - pb.envelope_at[0, 0]),
                                   **outcome(da.envelope_at[:, 0] - db.envelope_at[:, 0], margin, seed=seed_of),
                                   loss=float(pa.envelope_at[0, 0]), baseline_loss=float(pb.envelope_at[0, 0]))
            if row["verdict"] != "not_resolved" and row["measured"]["verdict"] == "not_resolved":
                row["note"] = "rests on the fitted laws alone: the measured difference at C* is not resolved"
            eq["archs"][a] = row
        vs = [r["verdict"] for r in eq["archs"].values()]
        eq["verdict"] = ("reproduced" if all(v in ("better", "equivalent") for v in vs) else
                         "not reproduced" if "worse" in vs else "not resolved")
    out["equal_compute"] = eq
    for key, field in (("law_at_common_compute", "law_at"), ("common_compute", "envelope_at")):
        out[key] = dict(compute=c_star, unfitted=unfitted, **(_ranking(
            {a: float(getattr(p, field)[0, 0]) for a, (p, _) in fitted.items()},
            {a: getattr(d, field)[:, 0] for a, (_, d) in fitted.items()}, baseline) if fitted else {}))
    # finding 1 ---------------------------------------------------------------------------------
    out["power_laws"] = power_laws(prep, draws, fitted, unfitted, tolerance) if holdout else \
        dict(verdict="not measured", archs={})
    return out


def power_laws(prep: dict, draws: dict, fitted: dict, unfitted: dict, tolerance: float) -> dict:
    from linscale_jax.fit.holdout import envelope_lack_of_fit, held_out_sizes
    from linscale_jax.fit.table import FitError

    res = {}
    for a, cs in prep["curves"].items():
        if a in unfitted:
            res[a] = dict(verdict="not_resolved", note=unfitted[a])
            continue
        point, d = fitted[a]
        ex = outcome(d.exponent, 0.0)
        r = dict(verdict="not_resolved", exponent=float(point.exponent[0]), failed=ex["failed"])
        if ex["ci_low"] is None:
            res[a] = dict(r, reason=UNSTABLE)
            continue
        r["exponent_ci"] = [ex["ci_low"], ex["ci_high"]]
        try:
            r["lack_of_fit"] = envelope_lack_of_fit(cs, prep["pooled"])
        except FitError as e:
            r["lack_of_fit"] = dict(note=str(e))
        n_held = held_out_sizes(len(cs))
        small, held = cs[:-n_held], cs[-n_held:]
        r["holdout"] = []
        if len(small) >= 3:
            p_small, d_small = laws(small, draws[a][:-n_held], [c.flops[-1] for c in held])
            for j, c in enumerate(held):
                err = draws[a][len(small) + j][:, -1] - d_small.law_at[:, j]
                o = outcome(err, tolerance)
                r["holdout"].append(dict(
                    n_params=c.n_params, predicted=float(p_small.law_at[0, j]), actual=float(c.mean[-1]),
                    diff=float(c.mean[-1] - p_small.law_at[0, j]),
                    **{k: o[k] for k in ("ci_low", "ci_high", "ci90_low", "ci90_high", "failed")}))
        else:
            r["note"] = f"no held-out check: {len(small)} size(s) below the held-out (needs 3)"
        hs = r["holdout"]
        lo, hi = r["exponent_ci"]
        if lo > 0 or any(h["ci_low"] is not None and (h["ci_low"] > tolerance or h["ci_high"] < -tolerance)
                         for h in hs):
            r["verdict"] = "fails"
        elif hi < 0 and hs and all(h["ci90_low"] is not None and -tolerance < h["ci90_low"]
                                   and h["ci90_high"] < tolerance for h in hs):
            r["verdict"] = "holds"
        elif any(h["ci_low"] is None for h in hs):
            r["reason"] = UNSTABLE
        res[a] = r
    vs = [r["verdict"] for r in res.values()]
    verdict = ("reproduced" if vs and all(v == "holds" for v in vs) else
               "not reproduced" if "fails" in vs else "not resolved")
    return dict(verdict=verdict, archs=res, tolerance=tolerance)


def combine(verdicts: dict, what: str = "estimator") -> str:
    """One verdict from {name: verdict}: the common one, else 'depends on the <what>'."""
    vals = set(verdicts.values())
    return vals.pop() if len(vals) == 1 else f"depends on the {what}"


ROW_KEYS = ("diff", "ci_low", "ci_high", "verdict", "reason", "failed", "mde", "power_model", "halfwidth90", "measured",
            "note")


def judge_all(tables: dict, recall_rows=None, recall_source: str = "", priors: dict | None = None,
              **kw) -> dict:
    """{estimator: Table} -> the findings JSON: per finding `verdict` (combined over estimators),
    `by_estimator`, and per arch the first estimator's numbers with the combined verdict. `priors`:
    {estimator: SeedSd} (study.scaling.seed_prior)."""
    from linscale_jax.study.recall.verdicts import equal_steps
    from linscale_jax.study.scaling import findings

    per = {name: judge(t, prior=(priors or {}).get(name), **kw) for name, t in tables.items()}
    first = next(iter(per))
    out = dict(estimators=list(per), margin=per[first]["margin"], tolerance=per[first]["tolerance"],
               findings={}, by_estimator=per)
    for key in ("power_laws", "equal_compute"):
        f = dict(verdict=combine({n: p[key]["verdict"] for n, p in per.items()}),
                 by_estimator={n: p[key]["verdict"] for n, p in per.items()}, archs={})
        for a in per[first][key]["archs"]:
            rows = {n: p[key]["archs"].get(a, {}) for n, p in per.items()}
            f["archs"][a] = dict(rows[first], verdict=combine({n: r.get("verdict") for n, r in rows.items()}),
                                 by_estimator={n: {k: r.get(k) for k in ROW_KEYS if k in r}
                                               for n, r in rows.items()})
        if "compute" in per[first][key]:
            f["compute"] = per[first][key]["compute"]
        out["findings"][key] = f
    labels = list(per[first]["equal_compute"]["archs"])  # the study's archs but the baseline
    v3, lines = findings.retrieval(recall_rows, recall_source, labels)
    out["findings"]["retrieval"] = dict(verdict=v3.replace("**", ""), archs=equal_steps(recall_rows, labels=labels))
    out["retrieval_lines"] = lines
    return out


def load_tables(specs: list[str], min_step: float = 0.0, unit: str = "pf-days") -> dict:
    """['FILE' or 'NAME=FILE', ...] -> {name: Table} (rows with step >= min_step, C in `unit`)."""
    from linscale_jax.fit.table import load

    out = {}
    for i, spec in enumerate(specs):
        name, path = spec.split("=", 1) if "=" in spec else (f"table{i + 1}" if len(specs) > 1 else "loss", spec)
        t = load(path).with_compute_unit(unit)
        out[name] = t.take(t.step >= min_step)
    return out


def plain(x):
    """A JSON-ready copy: numpy scalars and arrays to Python numbers and lists, NaN and inf to None."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [plain(v) for v in x]
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    return x


def _iv(lo, hi) -> str:
    return "no interval" if lo is None else f"[{lo:+.3f}, {hi:+.3f}]"


def text(result: dict) -> str:
    """A plain-text rendering of judge_all's JSON."""
    from linscale_jax.study.scaling.findings import label

    L = [f"estimators: {', '.join(result['estimators'])}; margin ±{result['margin']:g} nats (equivalence), "
         f"held-out tolerance ±{result['tolerance']:g} nats"]
    for key, f in result["findings"].items():
        L.append(f"{key}: {f['verdict']}" + (f"  (by estimator: {f['by_estimator']})" if "by_estimator" in f
                                              and len(result["estimators"]) > 1 else ""))
        for a, r in f["archs"].items():
            cells = []
            for n, e in r.get("by_estimator", {}).items():
                if e.get("diff") is None:
                    cells.append(f"{n}: {label(e)}")
                    continue
                m = e.get("measured") or {}
                cells.append(f"{n}: {e['diff']:+.3f} {_iv(e['ci_low'], e['ci_high'])} {label(e)}"
                             + (f", measured {m['diff']:+.3f} {_iv(m['ci_low'], m['ci_high'])}" if m else "")
                             + (f", MDE {e['mde']:.3f}" if e.get("mde") is not None else ""))
            L.append(f"  {a}: {r['verdict']}" + (f"  ({'; '.join(cells)})" if cells else ""))
    return "\n".join(L)


def command(tables: list[str], recall: str = "", margin: float = DEFAULT_MARGIN,
            tolerance: float = DEFAULT_TOLERANCE, seed_sd: float | None = None, bootstrap: int = 200,
            seed: int = 0, min_step: float = 0.0, as_json: bool = False) -> str:
    """`python -m linscale_jax.study verdicts`: the findings judged from checkpoint tables ('FILE' or
    'NAME=FILE', one per loss estimator) and a recall.csv, as text or JSON."""
    from linscale_jax.study.scaling import findings

    res = judge_all(load_tables(tables, min_step), findings.read_recall(recall) if recall else None, recall,
                    margin=margin, tolerance=tolerance, seed_sd=seed_sd, n_boot=bootstrap, seed=seed)
    return json.dumps(plain(res["findings"]), indent=2) if as_json else text(res)
