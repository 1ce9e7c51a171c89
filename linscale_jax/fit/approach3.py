"""Approach 3: the parametric loss ``L(N, D) = E + A / N**alpha + B / D**beta``.

Fitted in log space with the log-sum-exp parametrisation of Hoffmann et al. (2022) as replicated by
Besiroglu et al. (2024): with theta = (a, b, e, alpha, beta) and A, B, E = exp(a), exp(b), exp(e),

    ln L_hat = LSE(a - alpha ln N, b - beta ln D, e),
    objective = sum over points of Huber_delta(ln L_hat - ln L),   delta = 1e-3,

minimised by L-BFGS-B (scipy, float64, analytic gradient) from a grid of initialisations: the
objective is evaluated at every grid point and the ``n_starts`` best are refined (all of them with
``n_starts=None``). The implied compute-optimal allocation under ``C = k N D`` (k = 6 by default) is

    N_opt = G (C/k)**a_N,  D_opt = (C/k) / N_opt,  G = (alpha A / (beta B))**(1/(alpha+beta)),
    a_N = beta/(alpha+beta),  L_opt(C) = E + K C**(-alpha beta/(alpha+beta)).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools

import numpy as np
from scipy import optimize

from linscale_jax.fit.powerlaw import PowerLaw
from linscale_jax.fit.table import FitError, Table, require
from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN

PARAMS = ("E", "A", "B", "alpha", "beta")
DELTA = 1e-3
# Hoffmann et al.'s initialisation grid: 5 x 5 x 5 x 6 x 6 = 4,500 starts.
GRID = {"alpha": np.arange(0.0, 2.5, 0.5), "beta": np.arange(0.0, 2.5, 0.5),
        "e": np.arange(-1.0, 1.5, 0.5), "a": np.arange(0.0, 30.0, 5.0),
        "b": np.arange(0.0, 30.0, 5.0)}


@dataclasses.dataclass(frozen=True)
class Result:
    arch: str
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float  # summed Huber loss at the optimum
    n_points: int
    n_runs: int
    flops_per_param_token: float
    laws: dict[str, PowerLaw]  # implied L_C (with irreducible E), N_opt_C, D_opt_C
    form = "additive"  # E + A/N^alpha + B/D^beta (fit.kaplan: the joint form)

    @property
    def theta(self) -> np.ndarray:
        return np.array([np.log(self.A), np.log(self.B), np.log(self.E), self.alpha, self.beta])

    def params(self) -> dict[str, float]:
        out = {p: getattr(self, p) for p in PARAMS}
        out["a"] = self.beta / (self.alpha + self.beta)
        for k, law in self.laws.items():
            out.update({f"{k}.{p}": v for p, v in law.params().items()})
        return out

    def predict(self, n, d):
        return loss(self.E, self.A, self.B, self.alpha, self.beta, n, d)


def loss(E, A, B, alpha, beta, n, d):
    """L(n, d) = E + A/n^alpha + B/d^beta."""
    return E + A / np.asarray(n, float) ** alpha + B / np.asarray(d, float) ** beta


def huber(r, delta=DELTA):
    """Elementwise Huber loss of residuals r: quadratic within delta, linear beyond."""
    absr = np.abs(r)
    return np.where(absr <= delta, 0.5 * r * r, delta * (absr - 0.5 * delta))


def huber_objective(theta, ln_n, ln_d, ln_l, delta=DELTA):
    """Summed Huber loss of the LSE model and its gradient; theta = (a, b, e, alpha, beta) [5]."""
    a, b, e, alpha, beta = theta
    t1, t2 = a - alpha * ln_n, b - beta * ln_d  # [p] each; the third LSE term is e
    m = np.maximum(np.maximum(t1, t2), e)
    w1, w2, w3 = np.exp(t1 - m), np.exp(t2 - m), np.exp(e - m)
    s = w1 + w2 + w3
    r = m + np.log(s) - ln_l
    loss = huber(r, delta).sum()
    g = np.clip(r, -delta, delta) / s  # dHuber/dr times the softmax normaliser
    g1, g2 = g * w1, g * w2
    grad = np.array([g1.sum(), g2.sum(), (g * w3).sum(), -(g1 @ ln_n), -(g2 @ ln_d)])
    return float(loss), grad


def _grid_objective(starts, ln_n, ln_d, ln_l, delta=DELTA, chunk=512):
    """Objective at many starts [s, 5] (no gradient), evaluated in chunks."""
    out = []
    for lo in range(0, len(starts), chunk):
        a, b, e, al, be = (starts[lo:lo + chunk, j][:, None] for j in range(5))
        t = np.stack(np.broadcast_arrays(a - al * ln_n, b - be * ln_d, e + 0 * ln_n))
        m = t.max(axis=0)
        r = m + np.log(np.exp(t - m).sum(axis=0)) - ln_l
        out.append(huber(r, delta).sum(axis=1))
    return np.concatenate(out)


def default_starts() -> np.ndarray:
    """The 4,500 grid starts as theta rows (a, b, e, alpha, beta)."""
    rows = itertools.product(GRID["a"], GRID["b"], GRID["e"], GRID["alpha"], GRID["beta"])
    return np.array(list(rows), dtype=np.float64)


def _one_blas_thread():
    """L-BFGS-B calls BLAS on 5-vectors; a multi-threaded BLAS only adds (large) sync overhead."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def minimise(ln_n, ln_d, ln_l, starts, n_starts: int | None = 16, bounds=None, objective=None, grid=None):
    """Best L-BFGS-B optimum over the ``n_starts`` most promising starts: (theta [5], objective);
    ``bounds``: optional [(lo, hi)] * 5 for theta (None: unbounded); ``objective`` (theta, ln_n, ln_d,
    ln_l) -> (loss, grad) and ``grid`` (starts [s, 5], ln_n, ln_d, ln_l) -> loss [s]: another form's
    (fit.kaplan), this one's by default."""
    objective, grid = objective or huber_objective, grid or _grid_objective
    starts = np.asarray(starts, dtype=np.float64).reshape(-1, 5)
    if n_starts is not None and len(starts) > n_starts:
        starts = starts[np.argsort(grid(starts, ln_n, ln_d, ln_l))[:n_starts]]
    best = (None, np.inf)
    with _one_blas_thread():
        for x0 in starts:
            res = optimize.minimize(objective, x0, args=(ln_n, ln_d, ln_l), jac=True,
                                    method="L-BFGS-B", bounds=bounds, options={"maxiter": 2000, "ftol": 1e-15,
                                                                "gtol": 1e-12})
            if np.all(np.isfinite(res.x)) and res.fun < best[1]:
                best = (res.x, float(res.fun))
    if best[0] is None:
        raise FitError("approach 3: every L-BFGS start failed (non-finite parameters); check the "
                       "table for extreme values")
    return best


def allocation_laws(E, A, B, alpha, beta, k: float = FLOPS_PER_PARAM_TOKEN) -> dict[str, PowerLaw]:
    """Compute-optimal L(C), N_opt(C), D_opt(C) implied by the fit under C = k N D."""
    s = alpha + beta
    a_n, a_d, gamma = beta / s, alpha / s, alpha * beta / s
    g = (alpha * A / (beta * B)) ** (1.0 / s)
    return {"L_C": PowerLaw((A * g**-alpha + B * g**beta) * k**gamma, -gamma, irreducible=E),
            "N_opt_C": PowerLaw(g * k**-a_n, a_n),
            "D_opt_C": PowerLaw(k**-a_d / g, a_d)}


def fit(table: Table, *, flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN, n_starts: int | None = 16,
        init: np.ndarray | None = None, bounds=None) -> Result:
    """Approach 3 on every point of one arch.

    ``init``: a single start theta [5] (a, b, e, alpha, beta) instead of the grid (bootstrap);
    ``bounds``: [(lo, hi)] * 5 for theta, None for unbounded (L-BFGS-B's box).
    """
    return fit_form(table, "approach 3", Result, allocation_laws, huber_objective, _grid_objective,
                    default_starts() if init is None else init, flops_per_param_token, n_starts, bounds)


def fit_form(table: Table, what: str, result, allocation, objective, grid, starts, flops_per_param_token: float,
             n_starts: int | None, bounds) -> Result:
    """A five-parameter law of theta (a, b, e, alpha, beta) on every point of one arch: `objective` and
    `grid` as minimise takes them, `result` its Result class, `allocation` its allocation_laws."""
    require(table, min_runs=2, min_points_per_run=1, what=f"{what} (parametric L(N, D))")
    if len(table) < 6 or len(np.unique(table.n_params)) < 2 or len(np.unique(table.tokens)) < 2:
        raise FitError(f"{table.arch[0]}: {what} needs at least 6 points with 2+ distinct N "
                       f"and D to fit 5 parameters, got {len(table)}; add runs or checkpoints")
    ln_n, ln_d, ln_l = np.log(table.n_params), np.log(table.tokens), np.log(table.loss)
    theta, obj = minimise(ln_n, ln_d, ln_l, np.asarray(starts, dtype=np.float64), n_starts, bounds, objective, grid)
    a, b, e, alpha, beta = (float(v) for v in theta)
    if alpha <= 0 or beta <= 0:
        raise FitError(f"{table.arch[0]}: {what} found alpha={alpha:.3g}, beta={beta:.3g} "
                       "(loss not falling with N or D); the table cannot pin L(N, D) down")
    E, A, B = np.exp(e), np.exp(a), np.exp(b)
    return result(arch=str(table.arch[0]), E=E, A=A, B=B, alpha=alpha, beta=beta, objective=obj,
                  n_points=len(table), n_runs=len(set(table.run.tolist())),
                  flops_per_param_token=flops_per_param_token,
                  laws=allocation(E, A, B, alpha, beta, flops_per_param_token))
