"""How often the study's finding-2 verdicts come out right, on simulations of the study's own design
(the steps of the "calibrate" kind, study.experiments).

    python -m linscale_jax.study --config=calibrate --workdir=DIR [--config.seeds=100] [--config.effect=0.1]
        [--config.bootstrap=B] [--config.replicate_sizes=smallest,largest --config.replicate_seeds=N]
        [--config.true_seed_sd=SD or SIZE=SD,...]
    cal = calibrate(DIR, seeds=100, effect=0.1)      # the same, in this process

DIR is a finished scaling study (findings.json and fit/table*.csv). Each simulated study has DIR's
sizes, checkpoints, tokens, replicates and estimators, and the noise model its own intervals assume
(scaling.verdicts.prepare, fit.bootstrap.draw_curves): each size's true curve is the baseline's
trend (quadratic in ln C of its replicate-mean curve), changed per case (null-equal,
null-crossing-at-C*, one arch lower, one arch higher); each run adds the arch's checkpoint noise
(AR(1) with the sd and lag-1 autocorrelation of its trend residuals) and a seed effect whose sd makes
a run's late loss vary over seeds by the study's pooled measured seed sd (`true_seed_sd`: another
one, or one per size), at 1x and 3x, as offsets or slope changes. The study's own judge
(scaling.verdicts.judge) decides each, pooling each simulated study's measured seed sd with the
study's seed sd prior where the study had one (study.scaling.seed_prior). So the 1x offset scenario
is the model behind the report's MDE (fit.power): its simulated power crosses 80% at the MDE. A
case is one run of the experiment (DIR/calibration/<design>/<case>/counts.json: the verdicts
counted per scenario, and per simulated study its intervals' widths, MDEs and model power), so the
four cases run on any backend; the join writes DIR/calibration.json (one entry per design: the
four shares, `n`, `target`, `by_scenario`, `widths` (how often two studies' interval widths agree
within 1.5x) of each case, and the study's own model power at the effect) and the report renders
DIR/report.md again and prints the table.
replicate_sizes/replicate_seeds simulate another replicate design and give its cost. Method and
targets: docs/study.md "Estimators and verdicts".
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from linscale_jax.contract import BASELINE_ARCH, TABLE_COLUMNS
from linscale_jax.study import files, inputs
from linscale_jax.study.scaling.verdicts import plain

CASES = ("null-equal", "null-crossing-at-C*", "one arch lower", "one arch higher")
SCENARIOS = (("1x offset", 1.0, False), ("3x offset", 3.0, False), ("1x slope", 1.0, True), ("3x slope", 3.0, True))
MODEL_VERSION = 3  # the simulated noise model (stored counts of another one are simulated again)
FALSE_RESOLVED_MAX = 0.10
POWER_MIN = 0.80


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


def late_variance(sd: float, rho: float, k: int) -> float:
    """Variance of the mean of the last k - k // 2 of k AR(1) checkpoint errors (sd, rho): the part of
    a run's late loss, whose sd over seeds is the measured seed sd (fit.bootstrap.seed_sd_of), that
    the checkpoint noise already gives."""
    m = k - k // 2
    if m < 1 or sd <= 0:
        return 0.0
    i = np.arange(m)
    return float(sd**2 * np.sum(rho ** np.abs(i[:, None] - i[None, :])) / m**2)


def true_seed_sd(spec: str) -> dict | float | None:
    """--config.true_seed_sd: "" (the study's measured pooled sd), one sd in nats, or SIZE=SD,... per
    size (every size of the study)."""
    spec = str(spec or "").strip()
    if not spec:
        return None
    try:
        if "=" not in spec:
            return float(spec)
        return {k.strip(): float(v) for k, v in (x.split("=", 1) for x in spec.split(","))}
    except ValueError:
        raise ValueError(f"--config.true_seed_sd={spec!r} is not a number or SIZE=SD,...; "
                         "use e.g. 0.016 or d16l2=0.021,d32=0.008") from None


def design(tabs: dict, found: dict, replicates: tuple | None = None, truth=None) -> dict:
    """Per estimator: the baseline's runs (name, n_params, tokens, flops per checkpoint and the true
    mean loss there: its size's trend, fit.bootstrap.Curve.trend; `replicates` (sizes, seeds) in
    place of the study's replicate runs), the common compute, per arch its checkpoint noise (sd, rho:
    the study's, as its intervals resample it) and per size the seed sd of a run's late loss (the
    study's pooled measured sd, or `truth`: one sd or {size: sd}) with the part of it the
    checkpoint noise gives."""
    from linscale_jax.fit.bootstrap import curves_of
    from linscale_jax.study.scaling import verdicts

    out = {}
    for est, t in tabs.items():
        base = t.select(BASELINE_ARCH)
        trends = {c.n_params: (np.log(c.flops), c.trend()[0]) for c in curves_of(base)}
        runs = [(name, float(r.n_params[0]), r.tokens.copy(), r.flops.copy()) for name, r in base.runs()]
        if replicates is not None:
            runs = replicated(runs, *replicates)
        runs = [(name, n, tok, fl, np.interp(np.log(fl), *trends[n])) for name, n, tok, fl in runs]
        by = found["by_estimator"][est]
        pool = float(by["seed_sd_pooled"]["sd"])
        sizes = sorted({_size(r[0]) for r in runs})
        if isinstance(truth, dict) and set(sizes) - set(truth):
            raise ValueError(f"--config.true_seed_sd has no sd for {', '.join(sorted(set(sizes) - set(truth)))}; "
                             f"give every size ({', '.join(sizes)}) or one sd")
        sd_of = {z: truth[z] if isinstance(truth, dict) else pool if truth is None else float(truth) for z in sizes}
        noise = {}
        for a in t.archs:
            n = by["noise"].get(a) or {}
            ck, rho = float(n.get("ckpt_sd") or 0.0), float(np.clip(n.get("rho") or 0.0, -0.5, 0.95))
            k = max(len(r[3]) for r in runs)
            seed = {z: float(np.sqrt(max(v**2 - late_variance(ck, rho, k), 0.0))) for z, v in sd_of.items()}
            noise[a] = (ck, rho, seed)
        c_star = verdicts.common_compute({BASELINE_ARCH: curves_of(base)})  # the simulated tables' C*
        out[est] = dict(runs=runs, noise=noise, c_star=c_star, c_min=float(base.flops.min()), seed_sd=sd_of)
    return out


def simulate(d: dict, case: str, effect: float, scenario: tuple, rng):
    """One simulated study table of one estimator (module docstring)."""
    from linscale_jax.fit.table import from_columns

    _, mult, slope = scenario
    cols = {c: [] for c in TABLE_COLUMNS}
    span = np.log(d["c_star"]) - np.log(d["c_min"])
    for a, (res_sd, rho, seed_sd) in d["noise"].items():
        for name, n, tok, fl, mu in d["runs"]:
            if a != BASELINE_ARCH:
                mu = mu + {"null-equal": 0.0, "one arch lower": -effect, "one arch higher": effect,
                           "null-crossing-at-C*": 0.0}[case]
                if case == "null-crossing-at-C*":
                    mu = mu + effect * (np.log(d["c_star"]) - np.log(fl)) / span
            sigma = mult * seed_sd[_size(name)]
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

    def share(x):  # "+0%", never "-0%"
        return f"{round(x, 2) + 0.0:+.0%}"

    text = f"{share(f['extra_share'])} of the study's compute (Table-1 C)" if f["extra_share"] is not None else ""
    if w["extra_share"] is not None:
        text += (f", {share(w['extra_share'])} of its measured run time ({w['design']:.0f} against {w['study']:.0f} "
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


def load_design(workdir: str, replicates: tuple | None = None, truth=None) -> tuple[dict, dict, tuple]:
    """(findings.json, the simulated design per estimator (design(): `replicates`, `truth`), and the
    linear archs) of the finished study in `workdir`."""
    from linscale_jax.study.scaling import verdicts

    path = files.study_path(workdir, files.FINDINGS_JSON)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist; run `python -m linscale_jax.study --config=... "
                                f"--workdir={workdir}` first (a finished scaling study)")
    found = inputs.findings(path)
    study_tabs = {}
    for i, est in enumerate(found["estimators"]):
        table = files.study_path(workdir, files.STUDY_FIT, files.fit_table_name(est, i == 0))
        study_tabs.update(verdicts.load_tables([f"{est}={table}"]))
    study_tabs = {e: t.take(t.step >= found["design"]["fit_min_step"]) for e, t in study_tabs.items()}
    linear = tuple(a for a in study_tabs[found["estimators"][0]].archs if a != BASELINE_ARCH)
    return found, design(study_tabs, found, replicates, truth), linear


def case_counts(found: dict, des: dict, linear: tuple, ci: int, seeds: int, effect: float,
                n_boot: int, scenarios=SCENARIOS) -> tuple[dict, dict]:
    """({scenario: {verdict: count}}, {scenario: {"<estimator>/<arch>": [[95% width, MDE, model power
    at `effect`] per study]}}) of case CASES[ci] over `seeds` simulated studies, taking `scenarios`
    in turn."""
    from linscale_jax.fit import power
    from linscale_jax.study.scaling import verdicts

    case = CASES[ci]
    counts = {s[0]: dict.fromkeys(verdicts.OUTCOMES, 0) for s in SCENARIOS}
    rows = {s[0]: {} for s in SCENARIOS}
    priors = {est: prior_of(found, est) for est in des}
    for s in range(seeds):
        scen = scenarios[s % len(scenarios)]
        rng = np.random.default_rng([ci, s])
        for est, d in des.items():
            r = verdicts.judge(simulate(d, case, effect, scen, rng), margin=found["margin"], n_boot=n_boot,
                               seed=s, holdout=False, linear=linear, prior=priors[est])
            for a, row in r["equal_compute"]["archs"].items():
                counts[scen[0]][row["verdict"]] += 1
                if row.get("ci_low") is not None:
                    m = power.Model.of(row["power_model"])
                    rows[scen[0]].setdefault(f"{est}/{a}", []).append(
                        [row["ci_high"] - row["ci_low"], row["mde"], power.power(effect, m)])
    return counts, rows


def prior_of(found: dict, estimator: str):
    """The seed sd prior the study pooled with its own under `estimator` (study.scaling.seed_prior),
    as fit.bootstrap.SeedSd, or None: the simulated studies pool theirs with it the same way."""
    from linscale_jax.fit.bootstrap import SeedSd

    check = found["by_estimator"][estimator].get("seed_sd_prior")
    return SeedSd.of(check["prior"]) if check else None


WIDTH_RATIO_MAX = 1.5  # two studies' interval widths agree when they are within this factor


def width_stability(rows: dict) -> dict:
    """Over every pair of simulated studies (1× offset scenario, one estimator and arch): the share
    whose 95% interval widths are within WIDTH_RATIO_MAX of each other, and the median ratio."""
    ratios = []
    for per in rows.values():
        w = np.array([x[0] for x in per], float)
        i, j = np.triu_indices(len(w), 1)
        ratios.append(np.maximum(w[i], w[j]) / np.minimum(w[i], w[j]))
    r = np.concatenate(ratios) if ratios else np.array([])
    return dict(within=float(np.mean(r <= WIDTH_RATIO_MAX)) if r.size else None,
                median_ratio=float(np.median(r)) if r.size else None, pairs=int(r.size))


def case_result(case: str, counts: dict, rows: dict | None = None) -> dict:
    """One case's entry: the shares of each verdict, n, the target and whether it is met, by scenario
    (with the simulated studies' own MDE and model power: their median and mean), and the
    interval widths' stability."""
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
        got = [x for per in (rows or {}).get(name, {}).values() for x in per]
        if got:
            by[name].update(mde=float(np.median([x[1] for x in got])), model_power=float(np.mean([x[2] for x in got])))
    widths = width_stability((rows or {}).get(SCENARIOS[0][0], {}))
    return dict(case=case, **shares, n=n, target=text, met=ok, by_scenario=by, widths=widths)


def design_label(replicates: tuple | None, truth: str = "") -> str:
    return (("the study's own design" if replicates is None else
             f"replicates: {replicates[1]} more seed(s) of {','.join(replicates[0])}")
            + (f"; true seed sd {truth}" if truth else ""))


def study_power(found: dict, effect: float) -> float | None:
    """The study's own noise model's power at `effect` (fit.power), averaged over its finding-2 rows
    (archs × estimators), as its report's MDEs state it; None where no row has a model."""
    from linscale_jax.fit import power

    got = []
    for p in found["by_estimator"].values():
        for r in p["equal_compute"]["archs"].values():
            m = r.get("power_model")
            if m:
                got.append(power.power(effect, power.Model.of(m)))
    return float(np.mean(got)) if got else None


def write(workdir: str, found: dict, des: dict, linear: tuple, cases: list, seeds: int, effect: float,
          n_boot: int, replicates: tuple | None, seconds: float, truth: str = "") -> dict:
    """This design's entry of DIR/calibration.json (which keeps one entry per design), written."""
    runs = des[found["estimators"][0]]["runs"]
    flags = ("" if replicates is None else
             f" --config.replicate_sizes={','.join(replicates[0])} --config.replicate_seeds={replicates[1]}")
    flags += f" --config.true_seed_sd={truth}" if truth else ""
    out = dict(design=design_label(replicates, truth), runs=len(runs) * len(linear + (BASELINE_ARCH,)),
               command=f"python -m linscale_jax.study --config=calibrate --workdir={workdir} --config.seeds={seeds} "
               f"--config.effect={effect:g}" + (f" --config.bootstrap={n_boot}" if n_boot != found["n_boot"] else "")
               + flags,
               seeds=seeds, effect=effect, n_boot=n_boot, scenarios=[s[0] for s in SCENARIOS], cases=cases,
               seconds=seconds, mde=_mde(found), cost=cost(found, runs),
               study_power=study_power(found, effect) if replicates is None and not truth else None,
               seed_sd=des[found["estimators"][0]]["seed_sd"])
    out["summary"] = summary(out)
    path = files.study_path(workdir, files.CALIBRATION_JSON)
    old = (inputs.calibration(path) or {}).get("designs", [])
    designs = [d for d in old if d.get("design") != out["design"]] + [plain(out)]
    designs.sort(key=lambda d: d["design"] != "the study's own design")
    with open(path, "w") as f:
        json.dump(dict(designs=designs), f, indent=2)
    return out


def calibrate(workdir: str, seeds: int = 100, effect: float = 0.1, n_boot: int | None = None,
              replicates: tuple | None = None, truth: str = "", log=None, cases=CASES) -> dict:
    """Simulate and judge `seeds` studies per case (module docstring) in this process; `replicates`
    (sizes, seeds) simulates that replicate design instead of the study's, `truth` (true_seed_sd())
    another true seed sd. Returns this design's entry of calibration.json."""
    t0 = time.time()
    found, des, linear = load_design(workdir, replicates, true_seed_sd(truth))
    n_boot = int(n_boot or found["n_boot"])
    out = []
    for case in cases:
        out.append(case_result(case, *case_counts(found, des, linear, CASES.index(case), seeds, effect, n_boot)))
        if log:
            log(json.dumps(results_line(out[-1])))
    return write(workdir, found, des, linear, out, seeds, effect, n_boot, replicates, time.time() - t0, truth)


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
