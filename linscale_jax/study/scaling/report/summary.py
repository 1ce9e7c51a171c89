"""The first screen of report.md: the study's answer in at most MAX_LINES lines, from findings.json
(and calibration.json) alone.

    lines = section(doc)       # doc: report.Doc (workdir, found, calibration, ...)

One item per question, each a function doc -> lines (ITEMS; a new one is a function added there):
each finding's verdict with its key number and interval, the lowest loss at the common compute,
whether the allocation laws are measured optima or bounds, the held-out predictions' systematic
bias, the design's power (from the calibration, or the command that measures it), and what was not
measured and why.
"""

from __future__ import annotations

from linscale_jax.contract import BASELINE_ARCH
from linscale_jax.study.scaling import findings, holdout
from linscale_jax.study.scaling.report import state

MAX_LINES = 15
TITLE = "## Summary"
NOT_MEASURED = "not measured"


def _iv(v, lo, hi, d=3) -> str:
    return f"{v:+.{d}f}" + ("" if lo is None else f" [{lo:+.{d}f}, {hi:+.{d}f}]")


def _span(lo: float, hi: float) -> str:
    return f"{lo:.0%}" if round(lo, 2) == round(hi, 2) else f"{lo:.0%}–{hi:.0%}"


def _head(verdict: str) -> tuple[str, str]:
    """('not measured', its reason) of a verdict such as 'not measured here: run ...' or
    'not measured (Positive control not met: ...)'; (verdict, '') otherwise."""
    if not verdict.startswith(NOT_MEASURED):
        return verdict, ""
    rest = verdict[len(NOT_MEASURED):].removeprefix(" here").strip(" :")
    return NOT_MEASURED, rest[1:-1] if rest.startswith("(") and rest.endswith(")") else rest


def finding_lines(doc) -> list[str]:
    """One line per finding: its verdict and its key numbers with 95% intervals."""
    fd, titles = doc.found["findings"], dict(findings.TITLES)
    out = []
    pl = fd["power_laws"]
    exps = [f"{a} {_iv(r['exponent'], *(r.get('exponent_ci') or [None, None]), d=4)}"
            for a, r in pl["archs"].items() if r.get("exponent") is not None]
    text = f"- **{titles['power_laws']}: {_head(pl['verdict'])[0]}**"
    if exps:
        text += f". L(C) exponent [95%]: {'; '.join(exps)}"
    if (pl.get("bias") or {}).get("n"):
        text += f". Largest size(s) predicted by L(C) fitted without them: {holdout.bias_text(pl['bias'])}"
    out.append(text + ".")
    eq = fd["equal_compute"]
    text = f"- **{titles['equal_compute']}: {_head(eq['verdict'])[0]}**"
    rows = [f"{a} {_iv(r['diff'], r.get('ci_low'), r.get('ci_high'))} ({findings.label(r)})"
            for a, r in eq["archs"].items() if r.get("diff") is not None]
    if rows:
        text += f". Fitted arch − {BASELINE_ARCH} at C* = {eq['compute']:.3g} PF-days, nats [95%]: " + "; ".join(rows)
    out.append(text + ".")
    rt = fd["retrieval"]
    text = f"- **{titles['retrieval']}: {_head(rt['verdict'])[0]}**"
    if rt.get("archs"):
        from linscale_jax.study.recall.verdicts import summary_text

        text += f". MQAR accuracy, arch − {BASELINE_ARCH} at equal steps [95%]: {summary_text(rt['archs'])}"
    out.append(text + ".")
    return out


def lowest_line(doc) -> list[str]:
    """The lowest loss at the largest common compute, measured on the envelopes."""
    c = doc.found.get("common_compute") or {}
    if not c.get("runner_up"):
        return []
    return [f"- Lowest measured loss at C* = {c['compute']:.3g} PF-days: **{c['best']}**; {c['runner_up']} is "
            f"{_iv(*c['diff'])} nats higher ({'resolved' if c.get('resolved') else 'not resolved'})."]


def allocation_line(doc) -> list[str]:
    """Whether N_opt(C), D_opt(C) are measured optima or bounds, and the measured tokens per parameter."""
    from linscale_jax.fit.approach1 import MOSTLY_BOUNDS

    found = doc.found
    first = found["estimators"][0]
    inner = {a: s["interior"] for a, s in (found.get("bracketing") or {}).get(first, {}).items()}
    if not inner:
        return []
    bounds = [a for a, x in inner.items() if 1 - x > MOSTLY_BOUNDS]
    if bounds and found["design"]["include_clamped"]:
        lo, hi = min(inner[a] for a in bounds), max(inner[a] for a in bounds)
        text = (f"- N_opt(C) and D_opt(C) of {', '.join(bounds)} are **bounds, not measured optima**: their "
                f"envelopes are interior on {_span(lo, hi)} of the compute grid ({first})")
    else:
        text = (f"- The envelopes are interior on {_span(min(inner.values()), max(inner.values()))} of the compute "
                f"grid ({first})")
    tpp = [f"{a} {o['tokens_per_param']['paper']['median']:.3g}" for a, o in (found.get("optimum") or {}).items()
           if o.get("points") and "paper" in o.get("tokens_per_param", {})]
    if tpp:
        text += f"; tokens per parameter at the measured optimum (median): {', '.join(tpp)}"
    return [text + "."]


def holdout_line(doc) -> list[str]:
    """The approach-3 held-out check: how many inside, and the errors' systematic part."""
    h = doc.found.get("holdout") or {}
    rows = h.get("rows") or []
    if not rows:
        return []
    inside = sum(bool(r["inside"]) for r in rows)
    return [f"- Held-out largest size(s), L(N, D) fitted without them: {inside} of {len(rows)} inside their "
            f"95% intervals; {holdout.bias_text(h.get('bias'))}."]


def power_line(doc) -> list[str]:
    """The design's power from DIR/calibration.json (the study's own design), else the command."""
    cal = next((d for d in (doc.calibration or {}).get("designs", []) if d["design"] == "the study's own design"),
               None)
    mdes = [r.get("mde") for r in doc.found["findings"]["equal_compute"]["archs"].values() if r.get("mde")]
    mde = f" (the study's own minimal detectable effect at C*: {min(mdes):.3f}–{max(mdes):.3f} nats)" if mdes else ""
    if cal is None:
        return [f"- Power not calibrated: run `python -m linscale_jax.study --config=calibrate "
                f"--workdir={doc.workdir}`{mde}."]
    by = {c["case"]: c for c in cal["cases"]}

    def at_1x(case):
        s = [v["resolved"] for k, v in by[case]["by_scenario"].items() if k.startswith("1x")]
        return sum(s) / len(s)

    nulls = [c["better"] + c["worse"] for k, c in by.items() if k.startswith("null")]
    return [f"- Power (calibration, {cal['seeds']} simulated studies per case): a {cal['effect']:g}-nat difference "
            f"is resolved in the right direction in {at_1x('one arch lower'):.0%} (lower) / "
            f"{at_1x('one arch higher'):.0%} (higher) of studies at the measured seed sd; false resolved in "
            f"the nulls at most {max(nulls):.0%}{mde}."]


def not_measured_line(doc) -> list[str]:
    """Everything the study did not measure, each with its reason, in one line."""
    found, items = doc.found, []
    for n, (key, _) in enumerate(findings.TITLES, 1):
        head, why = _head(found["findings"][key]["verdict"])
        if head == NOT_MEASURED:
            items.append(f"finding {n} ({why or f'no {BASELINE_ARCH} run or no linear arch to compare'})")
    for key, name in (("niah", "NIAH"), ("probe", "line probe")):
        why = ((found.get("probes") or {}).get(key) or {}).get("not_measured")
        if why:
            items.append(f"{name} ({why})")
    no_opt = [a for a, o in (found.get("optimum") or {}).items() if not o.get("points")]
    if no_opt:
        items.append(f"the optimum of {', '.join(no_opt)} (no interior envelope point: bounds only)")
    for a, e in (found.get("fit_errors") or {}).items():
        items.append(f"the laws of {a} ({e})")
    for a, e in ((found.get("holdout") or {}).get("errors") or {}).items():
        items.append(f"the held-out prediction of {a} ({e})")
    return [f"- Not measured: {'; '.join(items)}."] if items else []


ITEMS = (finding_lines, lowest_line, allocation_line, holdout_line, state.summary_line, power_line,
         not_measured_line)


def section(doc) -> list[str]:
    """The summary (module docstring): at most MAX_LINES lines with its title."""
    lines = [TITLE, ""] + [line for item in ITEMS for line in item(doc)]
    if len(lines) > MAX_LINES:
        raise ValueError(f"the report's summary has {len(lines)} lines, more than {MAX_LINES}; shorten an item")
    return lines + [""]
