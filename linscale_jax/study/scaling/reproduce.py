"""Finding 2 in two studies of one design (another init seed): does the second reproduce the first?

    rows = finding2(first, second)        # first, second: findings.json dicts; a row per (estimator, arch)
    lines = section(first, second, ("seed 0", "seed 7"))   # markdown lines (side_by_side.render appends them)

Per linear arch and estimator: finding 2's difference at C* (arch − llama, nats) with its 95 %
interval and verdict in each study, whether the second study's difference lies inside the first's
interval, whether the two estimates are consistent (the z test of their difference), the ratio of
the interval widths (second / first), and each study's MDE and model power at EFFECT (fit.power on
the row's power_model; None for a study written before it had one). Per estimator: the pooled seed
sd each study measured, with its df.

"Inside" and "consistent" ask different questions. The second study's estimate carries its own
noise, so even under a correct noise model it lands inside the first's 95 % interval with
probability P(|Z| < 1.96/sqrt(2)) = 83 % when the two are equally wide, and 6 of 6 rows do so in
about a third of replicate studies. The z test, (diff_2 − diff_1) over the root of the two
variances (each read from the half of its interval that faces the other estimate, / 1.96), is
consistent (|z| <= 1.96) in 95 % of them: a row that fails it is a seed-to-seed change the intervals
do not hold.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.fit import power

EFFECT = 0.1  # nats: the difference whose power the section shows (the calibration's effect)
WIDTH_RATIO = 1.5  # two studies' widths "agree" when their ratio lies within this factor
Z95 = 1.959964  # the two-sided 95 % normal quantile


def _power(row: dict) -> float | None:
    m = row.get("power_model")
    return None if not m else power.power(EFFECT, power.Model.of(m))


def _archs(found: dict) -> dict:
    eq = found.get("findings", {}).get("equal_compute")
    return eq.get("archs", {}) if isinstance(eq, dict) else {}


def finding2(first: dict, second: dict) -> list[dict]:
    """One dict per (estimator, arch) judged in both studies: estimator, arch, then per study i in
    (1, 2) diff_i, ci_low_i, ci_high_i, verdict_i, mde_i, power_i; `inside` (diff_2 in the first's
    95 % interval), `z` and `consistent` (module docstring), `same_verdict`, `width_ratio` (second's
    95 % width over the first's)."""
    a, b = (_archs(f) for f in (first, second))
    rows = []
    for arch in a:
        if arch not in b:
            continue
        for est, r1 in a[arch].get("by_estimator", {}).items():
            r2 = b[arch].get("by_estimator", {}).get(est)
            if r2 is None or r1.get("ci_low") is None or r2.get("ci_low") is None:
                continue
            row = dict(estimator=est, arch=arch)
            for i, r in ((1, r1), (2, r2)):
                row.update({f"{k}_{i}": r.get(k) for k in ("diff", "ci_low", "ci_high", "verdict", "mde")})
                row[f"power_{i}"] = _power(r)
            row["inside"] = bool(r1["ci_low"] <= r2["diff"] <= r1["ci_high"])
            row["z"] = z_of(r1, r2)
            row["consistent"] = bool(abs(row["z"]) <= Z95)
            row["same_verdict"] = r1.get("verdict") == r2.get("verdict")
            row["width_ratio"] = float((r2["ci_high"] - r2["ci_low"]) / (r1["ci_high"] - r1["ci_low"]))
            rows.append(row)
    return rows


def z_of(r1: dict, r2: dict) -> float:
    """(diff_2 − diff_1) / sqrt(se_1² + se_2²), each se the half of its 95 % interval that faces the
    other estimate over 1.96 (bootstrap intervals are not symmetric)."""
    up = r2["diff"] >= r1["diff"]
    h1 = (r1["ci_high"] - r1["diff"]) if up else (r1["diff"] - r1["ci_low"])
    h2 = (r2["diff"] - r2["ci_low"]) if up else (r2["ci_high"] - r2["diff"])
    se = np.hypot(max(h1, 0.0), max(h2, 0.0)) / Z95
    gap = r2["diff"] - r1["diff"]
    if se > 0:
        return float(gap / se)
    return 0.0 if gap == 0 else float(np.copysign(np.inf, gap))  # two zero-width intervals


def seed_sds(found: dict) -> dict:
    """{estimator: (sd, df)}: the pooled seed sd a study's intervals used."""
    return {e: (v["seed_sd_pooled"]["sd"], v["seed_sd_pooled"]["df"])
            for e, v in found.get("by_estimator", {}).items() if v.get("seed_sd_pooled")}


def summary(rows: list[dict]) -> dict:
    """{"rows", "inside", "consistent", "same_verdict", "median_width_ratio", "widths_within"}
    (widths_within: rows whose width ratio lies within WIDTH_RATIO either way)."""
    w = np.array([r["width_ratio"] for r in rows], float)
    within = int(np.sum((w <= WIDTH_RATIO) & (w >= 1 / WIDTH_RATIO)))
    return dict(rows=len(rows), inside=sum(r["inside"] for r in rows), consistent=sum(r["consistent"] for r in rows),
                same_verdict=sum(r["same_verdict"] for r in rows),
                median_width_ratio=float(np.median(w)) if len(w) else None, widths_within=within)


def _ci(r: dict, i: int) -> str:
    return f"{r[f'diff_{i}']:+.3f} [{r[f'ci_low_{i}']:+.3f}, {r[f'ci_high_{i}']:+.3f}]"


def _num(x, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def section(first: dict, second: dict, names: tuple[str, str]) -> list[str]:
    """Markdown lines: the seed sds, the finding-2 rows of both studies, and a one-line summary;
    none when no arch and estimator has an interval in both."""
    rows = finding2(first, second)
    if not rows:
        return []
    n1, n2 = names
    sd1, sd2 = seed_sds(first), seed_sds(second)
    L = ["## Finding 2 in both studies", "",
         f"The pooled seed sd each study's intervals use (nats, df): " + "; ".join(
             f"{e}: {n1} {sd1[e][0]:.4f} ({_num(sd1[e][1], 'g')} df), {n2} {sd2[e][0]:.4f} ({_num(sd2[e][1], 'g')} df)"
             for e in sd1 if e in sd2) + ".", "",
         f"| estimator | arch | {n1}: diff [95%] | verdict | {n2}: diff [95%] | verdict | {n2} inside {n1}'s interval "
         f"| z, consistent | width ratio ({n2} / {n1}) | MDE ({n1} / {n2}) | power at {EFFECT:g} nats ({n1} / {n2}) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['estimator']} | {r['arch']} | {_ci(r, 1)} | {r['verdict_1']} | {_ci(r, 2)} | {r['verdict_2']} | "
                 f"{'yes' if r['inside'] else '**no**'} | {r['z']:+.1f}, {'yes' if r['consistent'] else '**no**'} | "
                 f"{r['width_ratio']:.2f} | {_num(r['mde_1'], '.3f')} / "
                 f"{_num(r['mde_2'], '.3f')} | {_num(r['power_1'], '.0%')} / {_num(r['power_2'], '.0%')} |")
    s = summary(rows)
    L += ["", f"**{s['inside']} of {s['rows']}** of {n2}'s differences lie inside {n1}'s 95 % intervals; "
              f"**{s['consistent']} of {s['rows']}** consistent with them (|z| <= 1.96; inside: 83 % a row under a "
              f"correct noise model, consistent: 95 %); {s['same_verdict']} of {s['rows']} verdicts agree; widths within {WIDTH_RATIO:g}× in "
              f"{s['widths_within']} of {s['rows']} (median ratio {s['median_width_ratio']:.2f})."]
    return L + [""]
