"""How often the study's finding-2 verdicts come out right, on simulations of the study's own design
(the steps of the "calibrate" kind, study.experiments).

    python -m linscale_jax.study --config=calibrate --workdir=DIR [--config.seeds=100] [--config.effect=0.1]
        [--config.bootstrap=B] [--config.replicate_sizes=smallest,largest --config.replicate_seeds=N]
    cal = calibrate(DIR, seeds=100, effect=0.1)      # the same, in this process

DIR is a finished scaling study (findings.json and fit/table*.csv). Each simulated study has DIR's
sizes, checkpoints, tokens, replicates and estimators; its losses are the baseline's fitted L(N, D),
changed per case (null-equal, null-crossing-at-C*, one arch lower, one arch higher), plus each
arch's own AR(1) residuals and seed effects at 1x and 3x its measured sd (offset or slope). The
study's own judge (scaling.verdicts.judge) decides each. A case is one run of the experiment
(DIR/calibration/<design>/<case>/counts.json: the verdicts counted per scenario), so the four cases
run on any backend; the join writes DIR/calibration.json (one entry per design: the four shares, `n`,
`target`, `by_scenario` of each case) and the report renders DIR/report.md again and prints the
table. replicate_sizes/replicate_seeds simulate another replicate design and give its cost. Method
and targets: docs/study.md "Estimators and verdicts".
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from linscale_jax import contract
from linscale_jax.contract import BASELINE_ARCH, TABLE_COLUMNS
from linscale_jax.study.scaling.verdicts import plain

CASES = ("null-equal", "null-crossing-at-C*", "one arch lower", "one arch higher")
SCENARIOS = (("1x offset", 1.0, False), ("3x offset", 3.0, False), ("1x slope", 1.0, True), ("3x slope", 3.0, True))
FALSE_RESOLVED_MAX = 0.10
POWER_MIN = 0.80


def _law(w: dict, n, d):
    return w["E"] + w["A"] / np.asarray(n, float) ** w["alpha"] + w["B"] / np.asarray(d, float) ** w["beta"]


def residual_ar1(table, law: dict) -> tuple[float, float]:
    """(sd, lag-1 autocorrelation) of one arch's within-run residuals around `law` (each run's mean
    removed; the sd scaled for that mean), pooled over runs (fit.bootstrap.ar1)."""
    from linscale_jax.fit.bootstrap import ar1

    res = []
    for _, r in table.runs():
        w = r.loss - _law(law, r.n_params, r.tokens)
        if len(w) >= 2:
            res.append((w - w.mean()) * np.sqrt(len(w) / (len(w) - 1)))
    sd, rho = ar1(res)
    return sd, float(np.clip(rho, -0.5, 0.95))


def _size(name: str) -> str:
    return name.split("-")[1]  # <arch>-<size>[-seed<k>]


def replicated(runs: list, sizes: list[str], seeds: int) -> list:
    """The seed-0 runs plus `seeds` replicates of each size in `sizes` (smallest, largest or a
    size name, as study.replicates.sizes)."""
    base = [r for r in runs if "-seed" not in r[0]]
    order = [_size(r[0]) for r in sorted(base, key=lambda r: r[1])]
    named = {order[0] if x == "smallest" else order[-1] if x == "largest" else x for x in sizes}
    unknown = named - set(order)
    if unknown:
        raise ValueError(f"--replicate_sizes names {sorted(unknown)}, not sizes of the study ({', '.join(order)}); "
                         "use smallest, largest or one of them")
    extra = [(f"{name}-seed{k}", n, tok, fl) for name, n, tok, fl in base if _size(name) in named
             for k in range(1, seeds + 1)]
    return base + extra


def design(tabs: dict, found: dict, replicates: tuple | None = None) -> dict:
    """Per estimator: the baseline's runs (n_params, tokens, flops per checkpoint; `replicates`
    (sizes, seeds) in place of the study's replicate runs), the common compute, the baseline's law,
    and per arch its noise (residual sd, rho, seed sd)."""
    from linscale_jax.fit.bootstrap import curves_of
    from linscale_jax.study.scaling import verdicts

    out = {}
    for est, t in tabs.items():
        base = t.select(BASELINE_ARCH)
        runs = [(name, float(r.n_params[0]), r.tokens.copy(), r.flops.copy()) for name, r in base.runs()]
        if replicates is not None:
            runs = replicated(runs, *replicates)
        laws = found["laws_nd"][est]
        by = found["by_estimator"][est]
        pool = by["seed_sd_pooled"]["sd"]
        noise = {}
        for a in t.archs:
            if "law" not in laws.get(a, {}):
                raise ValueError(f"{a} ({est}) has no fitted L(N, D) in findings.json ({laws.get(a, {}).get('note')}); "
                                 "the calibration simulates from it")
            sd = by["seed_sd"].get(a, {})
            noise[a] = (*residual_ar1(t.select(a), laws[a]["law"]), float(sd["sd"]) if sd.get("df") else pool)
        c_star = verdicts.common_compute({BASELINE_ARCH: curves_of(base)})  # the simulated tables' C*
        out[est] = dict(runs=runs, law=laws[BASELINE_ARCH]["law"], noise=noise, c_star=c_star,
                        c_min=float(base.flops.min()))
    return out


def simulate(d: dict, case: str, effect: float, scenario: tuple, rng):
    """One simulated study table of one estimator (module docstring)."""
    from linscale_jax.fit.table import from_columns

    _, mult, slope = scenario
    cols = {c: [] for c in TABLE_COLUMNS}
    span = np.log(d["c_star"]) - np.log(d["c_min"])
    for a, (res_sd, rho, seed_sd) in d["noise"].items():
        for name, n, tok, fl in d["runs"]:
            mu = _law(d["law"], n, tok)
            if a != BASELINE_ARCH:
                mu = mu + {"null-equal": 0.0, "one arch lower": -effect, "one arch higher": effect,
                           "null-crossing-at-C*": 0.0}[case]
                if case == "null-crossing-at-C*":
                    mu = mu + effect * (np.log(d["c_star"]) - np.log(fl)) / span
            sigma = mult * seed_sd
            if slope:
                lc = np.log(fl)
                x = (lc - lc.mean()) / max((lc.max() - lc.min()) / 2, 1e-12)
                seed = sigma * (rng.standard_normal() + rng.standard_normal() * x) / np.sqrt(2)
            else:
                seed = sigma * rng.standard_normal()
            e = np.empty(len(fl))
            e[0] = rng.standard_normal()
            for k in range(1, len(fl)):
                e[k] = rho * e[k - 1] + np.sqrt(1 - rho**2) * rng.standard_normal()
            y = np.maximum(mu + seed + res_sd * e, 1e-3)
            cols["arch"] += [a] * len(fl)
            cols["run"] += [name.replace(BASELINE_ARCH, a, 1)] * len(fl)
            cols["step"] += list(range(len(fl)))
            cols["n_params"] += [n] * len(fl)
            cols["tokens"] += list(tok)
            cols["flops"] += list(fl)
            cols["loss"] += list(y)
    return from_columns(f"simulated {case}", **cols)


def cost(found: dict, runs: list) -> dict:
    """Run time and compute of the simulated design against the study's: worker-minutes from the
    runs' timing sums (train, eval, cooldowns, as the report's 'Wall time') and Table-1 compute; a
    replicate costs what its size's seed-0 run cost."""
    def busy(r):
        t = r.get("timing") or {}
        return sum(float(t.get(k, 0.0)) for k in ("train_s", "eval_s", "cooldown_s")) / 60

    out = {}
    for key, of in (("worker_min", busy), ("pf_days", lambda r: float(r["pf_days"]))):
        per = {(r["arch"], r["size"]): of(r) for r in found.get("runs", []) if not r["seed"]}
        study = sum(of(r) for r in found.get("runs", []))
        design = sum(per.get((a, _size(name)), 0.0) for name, *_ in runs for a in {a for a, _ in per})
        out[key] = dict(study=study, design=design, extra_share=(design - study) / study if study else None)
    return dict(out, text=cost_text(out))


def cost_text(c: dict) -> str:
    """'+8% of the study's compute, +13% of its measured run time (165 against 146 worker-minutes)'"""
    w, f = c["worker_min"], c["pf_days"]
    text = f"{f['extra_share']:+.0%} of the study's compute (Table-1 C)" if f["extra_share"] is not None else ""
    if w["extra_share"] is not None:
        text += (f", {w['extra_share']:+.0%} of its measured run time ({w['design']:.0f} against {w['study']:.0f} "
                 "worker-minutes)")
    return text or "cost unknown"


def target(case: str, counts: dict) -> tuple[str, bool]:
    """A case's target: false resolved (better + worse) over every scenario in the nulls; with an
    effect, the share in the right direction at the measured seed sd (the 1× scenarios)."""
    if case.startswith("null"):
        n = sum(sum(c.values()) for c in counts.values())
        fr = sum(c["better"] + c["worse"] for c in counts.values()) / max(n, 1)
        return f"false resolved {fr:.0%} (<= {FALSE_RESOLVED_MAX:.0%})", fr <= FALSE_RESOLVED_MAX
    key = "better" if case == "one arch lower" else "worse"
    at = [c for (name, mult, _), c in zip(SCENARIOS, counts.values()) if mult == 1.0]
    right = sum(c[key] for c in at) / max(sum(sum(c.values()) for c in at), 1)
    return f"power {right:.0%} at the measured seed sd (>= {POWER_MIN:.0%})", right >= POWER_MIN


def load_design(workdir: str, replicates: tuple | None = None) -> tuple[dict, dict, dict, tuple]:
    """(findings.json, the simulated design per estimator (design()), and the linear archs) of the
    finished study in `workdir`."""
    from linscale_jax.study.scaling import verdicts

    path = contract.study_path(workdir, contract.FINDINGS_JSON)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist; run `python -m linscale_jax.study --config=... "
                                f"--workdir={workdir}` first (a finished scaling study)")
    found = json.load(open(path))
    if "laws_nd" not in found:
        raise ValueError(f"{workdir}/findings.json has no laws_nd; rerun `python -m linscale_jax.study --config=... "
                         f"--workdir={workdir} --join_only` to write it")
    study_tabs = {}
    for i, est in enumerate(found["estimators"]):
        table = contract.study_path(workdir, contract.STUDY_FIT, contract.fit_table_name(est, i == 0))
        study_tabs.update(verdicts.load_tables([f"{est}={table}"]))
    study_tabs = {e: t.take(t.step >= found["design"]["fit_min_step"]) for e, t in study_tabs.items()}
    linear = tuple(a for a in study_tabs[found["estimators"][0]].archs if a != BASELINE_ARCH)
    return found, design(study_tabs, found, replicates), linear


def case_counts(found: dict, des: dict, linear: tuple, ci: int, seeds: int, effect: float, n_boot: int) -> dict:
    """{scenario: {verdict: count}} of case CASES[ci] over `seeds` simulated studies."""
    from linscale_jax.study.scaling import verdicts

    case = CASES[ci]
    counts = {s[0]: dict.fromkeys(verdicts.OUTCOMES, 0) for s in SCENARIOS}
    for s in range(seeds):
        scen = SCENARIOS[s % len(SCENARIOS)]
        rng = np.random.default_rng([ci, s])
        for d in des.values():
            r = verdicts.judge(simulate(d, case, effect, scen, rng), margin=found["margin"], n_boot=n_boot,
                               seed=s, holdout=False, linear=linear)
            for row in r["equal_compute"]["archs"].values():
                counts[scen[0]][row["verdict"]] += 1
    return counts


def case_result(case: str, counts: dict) -> dict:
    """One case's entry: the shares of each verdict, n, the target and whether it is met, by scenario."""
    from linscale_jax.study.scaling import verdicts

    total = {o: sum(c[o] for c in counts.values()) for o in verdicts.OUTCOMES}
    n = sum(total.values())
    shares = {o: total[o] / n for o in verdicts.OUTCOMES}
    text, ok = target(case, counts)
    by = {}
    for name, c in counts.items():
        m = max(sum(c.values()), 1)
        right = c["better"] if case == "one arch lower" else c["worse"] if case == "one arch higher" else \
            c["better"] + c["worse"]
        by[name] = dict(resolved=right / m, **{o: c[o] / m for o in verdicts.OUTCOMES})
    return dict(case=case, **shares, n=n, target=text, met=ok, by_scenario=by)


def design_label(replicates: tuple | None) -> str:
    return ("the study's own design" if replicates is None else
            f"replicates: {replicates[1]} more seed(s) of {','.join(replicates[0])}")


def write(workdir: str, found: dict, des: dict, linear: tuple, cases: list, seeds: int, effect: float,
          n_boot: int, replicates: tuple | None, seconds: float) -> dict:
    """This design's entry of DIR/calibration.json (which keeps one entry per design), written."""
    runs = des[found["estimators"][0]]["runs"]
    flags = ("" if replicates is None else
             f" --config.replicate_sizes={','.join(replicates[0])} --config.replicate_seeds={replicates[1]}")
    out = dict(design=design_label(replicates), runs=len(runs) * len(linear + (BASELINE_ARCH,)),
               command=f"python -m linscale_jax.study --config=calibrate --workdir={workdir} --config.seeds={seeds} "
               f"--config.effect={effect:g}" + (f" --config.bootstrap={n_boot}" if n_boot != found["n_boot"] else "")
               + flags,
               seeds=seeds, effect=effect, n_boot=n_boot, scenarios=[s[0] for s in SCENARIOS], cases=cases,
               seconds=seconds, mde=_mde(found), cost=cost(found, runs))
    out["summary"] = summary(out)
    path = contract.study_path(workdir, contract.CALIBRATION_JSON)
    old = json.load(open(path)).get("designs", []) if os.path.exists(path) else []
    designs = [d for d in old if d.get("design") != out["design"]] + [plain(out)]
    designs.sort(key=lambda d: d["design"] != "the study's own design")
    with open(path, "w") as f:
        json.dump(dict(designs=designs), f, indent=2)
    return out


def calibrate(workdir: str, seeds: int = 100, effect: float = 0.1, n_boot: int | None = None,
              replicates: tuple | None = None, log=None) -> dict:
    """Simulate and judge `seeds` studies per case (module docstring) in this process; `replicates`
    (sizes, seeds) simulates that replicate design instead of the study's. Returns this design's
    entry of calibration.json."""
    t0 = time.time()
    found, des, linear = load_design(workdir, replicates)
    n_boot = int(n_boot or found["n_boot"])
    cases = []
    for ci, case in enumerate(CASES):
        cases.append(case_result(case, case_counts(found, des, linear, ci, seeds, effect, n_boot)))
        if log:
            log(json.dumps(results_line(cases[-1])))
    return write(workdir, found, des, linear, cases, seeds, effect, n_boot, replicates, time.time() - t0)


def _mde(found: dict) -> dict:
    """{arch: {estimator: MDE}} of the study's own finding-2 comparisons."""
    out = {}
    for est, p in found["by_estimator"].items():
        for a, r in p["equal_compute"]["archs"].items():
            out.setdefault(a, {})[est] = r.get("mde")
    return out


def summary(cal: dict) -> str:
    nulls = [c for c in cal["cases"] if c["case"].startswith("null")]
    hits = [c for c in cal["cases"] if not c["case"].startswith("null")]
    s = ("False resolved verdicts stay within 10% in both nulls. " if all(c["met"] for c in nulls) else
         "**False resolved verdicts exceed 10% in a null case**: the intervals are too narrow for this design. ")
    if all(c["met"] for c in hits):
        return s + (f"A difference of {cal['effect']:g} nats is resolved in the right direction in at least 80% "
                    "of studies.")
    mdes = [v for per in cal["mde"].values() for v in per.values() if v is not None]
    return s + (f"**Power at {cal['effect']:g} nats is below 80%**" + (
        f" (the study's own minimal detectable effects: {min(mdes):.3f} to {max(mdes):.3f} nats)" if mdes else "")
        + ". The intervals are set by the seed sd (its value and its few degrees of freedom) and by each size's "
        "checkpoint noise: more replicate seeds add degrees of freedom and average the seed offsets; "
        "`--replicate_sizes=... --replicate_seeds=N` simulates such a design and gives its cost.")


def results_line(c: dict) -> dict:
    return {"case": c["case"], **{k: round(c[k], 4) for k in ("better", "worse", "equivalent", "not_resolved")},
            "n": c["n"], "target": c["target"],
            "by_scenario": {k: round(v["resolved"], 4) for k, v in c["by_scenario"].items()}}
