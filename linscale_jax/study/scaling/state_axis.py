"""State size as an axis: the loss and the MQAR accuracy against the decoding state in floats per
layer, beside N and C, per family of labels that share a mixer (study.scaling.results writes it as
findings.json's `state_axis`; report.state renders it).

    family("gdn+expand_v=1")                 # 'gdn': the label without its state-resizing changes
    out = fit(runs, recall_rows, margin)     # {"loss": [...], "recall": [...], "state_fields": [...]}

A family is an arch label with the changes that only resize the recurrent state removed
(STATE_FIELDS: the head count, the key and value expansion), so `gdn` and `gdn+expand_v=1` are one
family and `gdn+hybrid=3:1` is another (its layers' mixers differ).

Loss. Each run's final validation loss, fitted per family by least squares as

    loss = a + b·ln X + s·log2 S        X: the run's compute C (Table 1) or its N; S: state floats per layer

so s is the change in loss, in nats, per doubling of the state at equal compute (or at equal
parameters), with its 95% and 90% intervals from the residuals (Student t, n − 3 degrees of
freedom). Why each run's final loss and not the laws' prediction at the common compute C*: every
run of a study ends at the same token budget, so its runs differ only in size (hence compute) and in
state, and each gives a point with its own C, N and S; a label's state grows with its size, so a
label has no single state at C*, and a family's two labels would give two points there and no
interval. The verdict reads s against the study's margin as the findings do: equivalent (the 90%
interval inside ±margin), better (more state lowers the loss: the 95% interval below 0), worse
(above 0), or not resolved.

MQAR. recall.csv's seed-mean cells (seed "all") that trained, per family and number of key-value
pairs: accuracy = a + s·log2 U (+ n·log2 N when N varies apart from the state), U the usable state
floats per layer (the state whose memory spans the context), weighted by each cell's 95% interval;
s's interval is the larger of the cells' own and the residuals' (when there are spare degrees of
freedom). Accuracy has no equivalence margin: more state raises it, lowers it, or not resolved.

A family whose labels hold one state per size (one label, or variants that do not change the
state) is listed with "needs two state sizes" and not fitted; too few points for the parameters
(or the state moving in lockstep with N or C) give "not resolved" and the reason.
"""

from __future__ import annotations

import math

import numpy as np

STATE_FIELDS = ("n_heads", "expand_v", "expand_k", "head_dim")
NEEDS_TWO = "needs two state sizes"
Z95 = 1.959964


def family(label: str) -> str:
    """The label without its state-resizing changes: 'gdn+expand_v=1' -> 'gdn',
    'tnl+short_conv=4+n_heads=2' -> 'tnl+short_conv=4'."""
    arch, *changes = str(label).split("+")
    kept = [c for c in changes if c.split("=", 1)[0] not in STATE_FIELDS]
    return "+".join([arch, *kept])


def _t95(dof: int, p: float = 0.975) -> float:
    from scipy import stats

    return float(stats.t.ppf(p, dof))


def least_squares(x: np.ndarray, y: np.ndarray, sd: np.ndarray | None = None) -> dict | None:
    """Least squares of y on the columns of x (an intercept added): {coef, se (of each column),
    dof, residual_sd}; weighted by 1/sd² when sd is given, the coefficients' standard errors then
    the larger of the known-variance ones and the residuals' (dof > 0). None when the design is
    rank-deficient (a column moves in lockstep with another)."""
    design = np.column_stack([np.ones(len(y)), x])
    n, k = design.shape
    if n < k or np.linalg.matrix_rank(design) < k:
        return None
    w = np.ones(n) if sd is None else 1.0 / np.maximum(np.asarray(sd, float), 1e-6) ** 2
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(design * sw[:, None], y * sw, rcond=None)
    cov_unit = np.linalg.inv(design.T @ (design * w[:, None]))
    dof = n - k
    resid = (y - design @ coef) * sw
    scale = float(resid @ resid / dof) if dof > 0 else math.nan
    if sd is None:
        se = np.sqrt(np.diag(cov_unit) * scale) if dof > 0 else np.full(k, math.nan)
    else:
        se = np.sqrt(np.diag(cov_unit) * (max(1.0, scale) if dof > 0 else 1.0))
    return dict(coef=coef[1:].tolist(), se=se[1:].tolist(), dof=dof,
                residual_sd=math.sqrt(scale) if dof > 0 else None)


def _verdict(lo: float, hi: float, lo90: float, hi90: float, margin: float | None) -> str:
    if margin is not None and -margin < lo90 and hi90 < margin:
        return "equivalent"
    return "better" if hi < 0 else "worse" if lo > 0 else "not_resolved"


def _states_by_size(rows: list[dict], key: str, size_key: str) -> bool:
    """True when some size holds two states among the rows (the axis has two points)."""
    seen: dict = {}
    for r in rows:
        seen.setdefault(r[size_key], set()).add(r[key])
    return len({r[key] for r in rows}) > 1 and any(len(v) > 1 for v in seen.values())


def loss_fits(runs: list[dict], margin: float) -> list[dict]:
    """Per family with a state variant: the loss per doubling of the state at equal C and at
    equal N (module docstring)."""
    out = []
    rows = [r for r in runs if r.get("val_loss") is not None and r.get("state_floats_per_layer")]
    for fam in dict.fromkeys(family(r["arch"]) for r in rows):
        mine = [r for r in rows if family(r["arch"]) == fam]
        labels = list(dict.fromkeys(r["arch"] for r in mine))
        entry = dict(family=fam, labels=labels, runs=len(mine),
                     points=[dict(label=r["arch"], size=r["size"], seed=r.get("seed", 0), n_params=r["n_params"],
                                  pf_days=r["pf_days"], state_floats=r["state_floats_per_layer"],
                                  loss=r["val_loss"]) for r in mine])
        if len(labels) < 2 or not _states_by_size(mine, "state_floats_per_layer", "size"):
            entry.update(status=NEEDS_TWO)
            out.append(entry)
            continue
        y = np.array([r["val_loss"] for r in mine], float)
        log2s = np.log2([r["state_floats_per_layer"] for r in mine])
        for name, col in (("compute", "pf_days"), ("params", "n_params")):
            got = least_squares(np.column_stack([np.log([r[col] for r in mine]), log2s]), y)
            if got is None or got["dof"] < 1:
                reason = (f"{len(mine)} runs for 3 parameters" if got is not None or len(mine) < 3 else
                          f"the state moves in lockstep with {'C' if col == 'pf_days' else 'N'} across these runs")
                entry[name] = dict(status="not_resolved", reason=reason)
                continue
            s, se, dof = got["coef"][1], got["se"][1], got["dof"]
            lo, hi = s - _t95(dof) * se, s + _t95(dof) * se
            lo90, hi90 = s - _t95(dof, 0.95) * se, s + _t95(dof, 0.95) * se
            entry[name] = dict(status="fitted", per_doubling=s, ci_low=lo, ci_high=hi, ci90_low=lo90, ci90_high=hi90,
                               slope_log_x=got["coef"][0], dof=dof, residual_sd=got["residual_sd"],
                               verdict=_verdict(lo, hi, lo90, hi90, margin))
        entry["status"] = "fitted" if any(entry[k].get("status") == "fitted" for k in ("compute", "params")) \
            else "not_resolved"
        out.append(entry)
    return out


def recall_fits(rows: list[dict] | None) -> list[dict]:
    """Per family and number of key-value pairs: MQAR accuracy per doubling of the usable state
    (module docstring); [] without recall rows."""
    if not rows:
        return []
    cells = [r for r in rows if r["seed"] == "all" and r["status"] != "did_not_train"]
    out = []
    for fam in dict.fromkeys(family(r["arch"]) for r in cells):
        for pairs in sorted({r["n_pairs"] for r in cells if family(r["arch"]) == fam}):
            mine = [r for r in cells if family(r["arch"]) == fam and r["n_pairs"] == pairs]
            entry = dict(family=fam, n_pairs=pairs, labels=list(dict.fromkeys(r["arch"] for r in mine)),
                         points=[dict(label=r["arch"], d_model=r["d_model"], head_dim=r["head_dim"],
                                      n_params=r["n_params"], usable_state_floats=r["usable_state_floats"],
                                      state_floats=r["state_floats"], accuracy=r["accuracy"],
                                      ci_low=r["ci_low"], ci_high=r["ci_high"]) for r in mine])
            if len({r["usable_state_floats"] for r in mine}) < 2:
                entry.update(status=NEEDS_TWO)
                out.append(entry)
                continue
            y = np.array([r["accuracy"] for r in mine], float)
            sd = np.array([max(r["ci_high"] - r["ci_low"], 1e-3) / (2 * Z95) for r in mine])
            log2u = np.log2([max(r["usable_state_floats"], 1) for r in mine])
            log2n = np.log2([r["n_params"] for r in mine])
            got, beside = least_squares(np.column_stack([log2u, log2n]), y, sd), "N"
            if got is None:  # N moves with the state (or is constant): the state alone
                got, beside = least_squares(log2u[:, None], y, sd), None
            if got is None:
                entry.update(status="not_resolved", reason="one usable state among the cells")
                out.append(entry)
                continue
            s, se = got["coef"][0], got["se"][0]
            lo, hi = s - Z95 * se, s + Z95 * se
            entry.update(status="fitted", beside=beside, per_doubling=s, ci_low=lo, ci_high=hi, dof=got["dof"],
                         verdict="raises" if lo > 0 else "lowers" if hi < 0 else "not_resolved")
            out.append(entry)
    return out


def recall_table_rows(path: str) -> list[dict]:
    """recall.csv's rows (study.recall.table.read_csv: checked, one line naming a bad row)."""
    from linscale_jax.study.recall.table import read_csv

    return read_csv(path)


def fit(runs: list[dict], recall_csv: str = "", margin: float | None = None) -> dict:
    """findings.json's `state_axis` (module docstring): the loss fits from the runs' rows
    (study.scaling.results.run_rows) and the MQAR fits from recall.csv when given."""
    return dict(state_fields=list(STATE_FIELDS), margin=margin, loss=loss_fits(runs, margin),
                recall=recall_fits(recall_table_rows(recall_csv) if recall_csv else None),
                recall_source=recall_csv or None)
