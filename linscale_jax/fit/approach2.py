"""Approach 2: IsoFLOP profiles, a parabola in ln N near each budget's minimum, then power laws.

For each compute budget C, the profile is loss against ln N over the runs that reach C (each run's
ln loss and ln tokens interpolated linearly in ln C, as Porian et al. 2024 read their curves). A
parabola ``loss = c0 + c1 x + c2 x**2`` (x = ln N) is fitted to the ``n_fit`` points around the
profile's discrete minimum; its vertex gives N_opt, the loss there L_opt, and D_opt is the profile's
ln tokens interpolated at the vertex (= C / (6 N_opt) when C = 6ND). Budgets whose minimum sits at
the smallest or largest size of the profile, whose parabola opens downwards, or whose vertex falls
outside the fitted points are dropped and reported. Power laws for N_opt(C), D_opt(C) and L(C) are
then fitted by least squares in log space over the kept budgets.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from linscale_jax.fit.powerlaw import PowerLaw, fit_power_law, fit_power_law_with_floor
from linscale_jax.fit.table import FitError, Table, log_curves, require

LAWS = ("L_C", "N_opt_C", "D_opt_C")


@dataclasses.dataclass(frozen=True)
class Budget:
    """One IsoFLOP profile (arrays [p], p = points on the profile, sorted by n) and its optimum."""

    compute: float
    n: np.ndarray
    tokens: np.ndarray
    loss: np.ndarray
    status: str  # "ok" or why the budget was dropped
    parabola: tuple[float, float, float] | None = None  # c0, c1, c2 in x = ln N
    window: tuple[int, int] | None = None  # [start, stop) of the points the parabola used
    n_opt: float = float("nan")
    d_opt: float = float("nan")
    l_opt: float = float("nan")


@dataclasses.dataclass(frozen=True)
class Result:
    arch: str
    budgets: list[Budget]
    laws: dict[str, PowerLaw]

    def params(self) -> dict[str, float]:
        return {f"{k}.{p}": v for k, law in self.laws.items() for p, v in law.params().items()}

    @property
    def excluded(self) -> dict:
        dropped = [b for b in self.budgets if b.status != "ok"]
        return {"budgets": len(self.budgets), "budgets_used": len(self.budgets) - len(dropped),
                "dropped": [{"compute": b.compute, "reason": b.status} for b in dropped]}


def fit_budget(compute: float, n, tokens, loss, n_fit: int = 5) -> Budget:
    """Parabola near the minimum of one profile (n, tokens, loss: arrays [p])."""
    # One point per size: equal N (seeds, bootstrap duplicates) are averaged.
    n, inverse = np.unique(np.asarray(n, dtype=np.float64), return_inverse=True)
    count = np.bincount(inverse)
    tokens, loss = (np.bincount(inverse, np.asarray(a, dtype=np.float64)) / count
                    for a in (tokens, loss))
    p = len(n)
    base = dict(compute=float(compute), n=n, tokens=tokens, loss=loss)
    if p < 3:
        return Budget(**base, status=f"only {p} model size(s) reach this budget; need 3")
    i = int(np.argmin(loss))
    if i in (0, p - 1):
        side = "smallest" if i == 0 else "largest"
        return Budget(**base, status=f"minimum at the {side} model size (edge)")
    k = min(max(n_fit, 3), p)
    start = min(max(i - k // 2, 0), p - k)
    x = np.log(n[start:start + k])
    x0 = x.mean()  # centred for conditioning
    q2, q1, q0 = np.polyfit(x - x0, loss[start:start + k], 2)
    c2, c1, c0 = q2, q1 - 2 * q2 * x0, q0 - q1 * x0 + q2 * x0**2  # back to powers of x
    window = (start, start + k)
    if c2 <= 0:
        return Budget(**base, status="parabola opens downwards", window=window)
    x_opt = x0 - q1 / (2 * q2)
    if not x[0] <= x_opt <= x[-1]:
        return Budget(**base, status="parabola vertex outside the fitted sizes", window=window)
    d_opt = float(np.exp(np.interp(x_opt, np.log(n), np.log(tokens))))
    return Budget(**base, status="ok", parabola=(c0, c1, c2), window=window,
                  n_opt=float(np.exp(x_opt)), d_opt=d_opt,
                  l_opt=float(c0 + c1 * x_opt + c2 * x_opt**2))


def fit_budgets(arch: str, budgets: list[Budget], irreducible: bool = False) -> Result:
    ok = [b for b in budgets if b.status == "ok"]
    if len(ok) < 3:
        raise FitError(
            f"{arch}: approach 2 kept {len(ok)} of {len(budgets)} IsoFLOP budgets (needs 3); the "
            "rest have their minimum at an edge or too few sizes. Train sizes that bracket the "
            "optimum at each budget, or use approach 1 or 3")
    c = np.array([b.compute for b in ok])
    fit_loss = fit_power_law_with_floor if irreducible else fit_power_law
    laws = {"L_C": fit_loss(c, [b.l_opt for b in ok], what=f"{arch}: L(C)"),
            "N_opt_C": fit_power_law(c, [b.n_opt for b in ok], what=f"{arch}: N_opt(C)"),
            "D_opt_C": fit_power_law(c, [b.d_opt for b in ok], what=f"{arch}: D_opt(C)")}
    return Result(arch=arch, budgets=budgets, laws=laws)


def fit_points(arch: str, flops, n, tokens, loss, n_fit: int = 5, irreducible=False) -> Result:
    """Approach 2 on ready IsoFLOP points: rows with equal ``flops`` form one profile."""
    flops = np.asarray(flops, dtype=np.float64)
    budgets = []
    for c in np.unique(flops):
        m = flops == c
        budgets.append(fit_budget(c, np.asarray(n)[m], np.asarray(tokens)[m],
                                  np.asarray(loss)[m], n_fit))
    return fit_budgets(arch, budgets, irreducible)


def isoflop_profiles(table: Table, n_budgets: int = 12, min_sizes: int = 3):
    """Budgets log-spaced over the compute range reached by >= ``min_sizes`` runs.

    Returns [(C, n [p], tokens [p], loss [p])] read off the runs' interpolated curves.
    """
    curves = log_curves(table)
    lo = np.array([c[2][0] for c in curves])
    hi = np.array([c[2][-1] for c in curves])
    fine = np.linspace(lo.min(), hi.max(), 512)
    count = ((fine[None, :] >= lo[:, None]) & (fine[None, :] <= hi[:, None])).sum(axis=0)
    ok = fine[count >= min_sizes]
    if len(ok) == 0:
        raise FitError(f"{table.arch[0]}: no compute value is reached by {min_sizes} runs; "
                       "approach 2 needs runs whose compute ranges overlap")
    out = []
    for g in np.linspace(ok.min(), ok.max(), n_budgets):
        inside = (lo <= g + 1e-12) & (hi >= g - 1e-12)
        cs = [curves[j] for j in np.flatnonzero(inside)]
        out.append((float(np.exp(g)), np.array([c[1] for c in cs]),
                    np.exp([np.interp(g, c[2], c[4]) for c in cs]),
                    np.exp([np.interp(g, c[2], c[3]) for c in cs])))
    return out


def fit(table: Table, *, n_budgets: int = 12, n_fit: int = 5, irreducible: bool = False) -> Result:
    """Approach 2 for one arch's training curves."""
    require(table, min_runs=3, min_points_per_run=2, what="approach 2 (IsoFLOP)")
    arch = str(table.arch[0])
    budgets = [fit_budget(c, n, d, l, n_fit) for c, n, d, l in isoflop_profiles(table, n_budgets)]
    return fit_budgets(arch, budgets, irreducible)
