"""Kaplan et al.'s (2020) joint form with a floor: ``L(N, D) = E + ((A/N)**(alpha/beta) + B/D)**beta``.

Where approach 3 (fit.approach3) adds a model term and a data term, this form lets them interact:
the tokens at which a model of N parameters stops gaining grow with N (as N**(alpha/beta)), so a
ladder whose small sizes train long and large sizes short does not hand its small sizes' flattening
to the large ones. Same parameters, theta = (a, b, e, alpha, beta) with A, B, E = exp(a), exp(b),
exp(e), fitted the same way (Huber on ln L, delta 1e-3, L-BFGS-B from the best of a grid of starts,
fit.approach3.minimise):

    ln L_hat = LSE(e, beta * LSE((alpha/beta)(a - ln N), b - ln D)).

Under C = k N D its compute-optimal allocation is, with s = alpha + beta,

    N_opt = G (C/k)**(beta/s),  G = (alpha A**(alpha/beta) / (beta B))**(beta/s),  D_opt = (C/k) / N_opt,
    L_opt(C) = E + (1 + alpha/beta)**beta A**alpha G**-alpha (C/k)**(-alpha beta/s).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN
from linscale_jax.fit import approach3
from linscale_jax.fit.powerlaw import PowerLaw
from linscale_jax.fit.table import Table

DELTA = approach3.DELTA
GRID = {"a": np.arange(0.0, 25.0, 5.0), "b": np.arange(5.0, 25.0, 5.0), "e": np.array([-2.0, -1.0, 0.0, 0.5]),
        "alpha": np.array([0.1, 0.3, 0.7]), "beta": np.array([0.1, 0.3, 0.7])}  # 720 starts


def log_loss(theta, ln_n, ln_d):
    """ln L_hat [p] at theta [5] = (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = theta
    u = np.stack(np.broadcast_arrays(alpha / beta * (a - ln_n), b - ln_d))
    s = np.logaddexp(u[0], u[1])
    return np.logaddexp(e, beta * s)


@dataclasses.dataclass(frozen=True)
class Result(approach3.Result):
    """A fit of this form: approach3.Result's fields, read with this form's L(N, D)."""

    form = "kaplan"

    def predict(self, n, d):
        return loss(self.E, self.A, self.B, self.alpha, self.beta, n, d)


def loss(E, A, B, alpha, beta, n, d):
    """L(n, d) = E + ((A/n)^(alpha/beta) + B/d)^beta."""
    return E + ((A / np.asarray(n, float)) ** (alpha / beta) + B / np.asarray(d, float)) ** beta


def huber_objective(theta, ln_n, ln_d, ln_l, delta=DELTA):
    """Summed Huber loss of ln L_hat against ln L and its gradient in theta [5]."""
    a, b, e, alpha, beta = theta
    x = a - ln_n
    u1, u2 = alpha / beta * x, b - ln_d
    s = np.logaddexp(u1, u2)  # [p]
    p1 = np.exp(u1 - s)  # share of the model term inside
    v = beta * s
    f = np.logaddexp(e, v)
    we, wv = np.exp(e - f), np.exp(v - f)
    r = f - ln_l
    total = approach3.huber(r, delta).sum()
    g = np.clip(r, -delta, delta)
    grad = np.array([(g * wv * p1 * alpha).sum(),
                     (g * wv * beta * (1 - p1)).sum(),
                     (g * we).sum(),
                     (g * wv * p1 * x).sum(),
                     (g * wv * (s - p1 * alpha * x / beta)).sum()])
    return float(total), grad


def _grid_objective(starts, ln_n, ln_d, ln_l, delta=DELTA):
    """Objective at many starts [s, 5] (no gradient)."""
    r = np.stack([log_loss(t, ln_n, ln_d) for t in starts]) - ln_l
    return approach3.huber(r, delta).sum(axis=1)


def default_starts() -> np.ndarray:
    """The grid starts as theta rows (a, b, e, alpha, beta)."""
    return np.array(list(itertools.product(*(GRID[k] for k in ("a", "b", "e", "alpha", "beta")))), np.float64)


def allocation_laws(E, A, B, alpha, beta, k: float = FLOPS_PER_PARAM_TOKEN) -> dict[str, PowerLaw]:
    """Compute-optimal L(C), N_opt(C), D_opt(C) of the form under C = k N D (module docstring)."""
    s = alpha + beta
    a_n, a_d, gamma = beta / s, alpha / s, alpha * beta / s
    g = (alpha * A ** (alpha / beta) / (beta * B)) ** (beta / s)
    return {"L_C": PowerLaw((1 + alpha / beta) ** beta * A**alpha * g**-alpha * k**gamma, -gamma, irreducible=E),
            "N_opt_C": PowerLaw(g * k**-a_n, a_n),
            "D_opt_C": PowerLaw(k**-a_d / g, a_d)}


def fit(table: Table, *, flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN, n_starts: int | None = 16,
        init: np.ndarray | None = None, bounds=None) -> Result:
    """This form on every point of one arch (``init``, ``bounds``: as fit.approach3.fit)."""
    return approach3.fit_form(table, "Kaplan's L(N, D)", Result, allocation_laws, huber_objective, _grid_objective,
                              default_starts() if init is None else init, flops_per_param_token, n_starts, bounds)
