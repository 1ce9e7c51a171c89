"""Power laws ``y = irreducible + coefficient * x**exponent`` fitted in log space."""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import optimize

from linscale_jax.fit.table import FitError


@dataclasses.dataclass(frozen=True)
class PowerLaw:
    coefficient: float
    exponent: float
    irreducible: float | None = None  # None for a pure power law

    def __call__(self, x):
        x = np.asarray(x, dtype=np.float64)
        return (self.irreducible or 0.0) + self.coefficient * x**self.exponent

    def params(self) -> dict[str, float]:
        out = {"coefficient": self.coefficient, "exponent": self.exponent}
        if self.irreducible is not None:
            out["irreducible"] = self.irreducible
        return out

    def scaled_input(self, scale: float) -> "PowerLaw":
        """The same law with x measured in units of ``scale`` (x_new = x / scale)."""
        return dataclasses.replace(self, coefficient=self.coefficient * scale ** self.exponent)

    def __str__(self) -> str:
        floor = f"{self.irreducible:.4g} + " if self.irreducible is not None else ""
        return f"{floor}{self.coefficient:.4g}·C^{self.exponent:+.4f}"


def _check(x, y, what):
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise FitError(f"{what}: x and y must be 1-D arrays of equal length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))) or (x <= 0).any() or (y <= 0).any():
        raise FitError(f"{what}: values must be finite and > 0 for a log-space fit")
    if len(np.unique(x)) < 2:
        raise FitError(f"{what}: needs at least 2 points with distinct x, got {len(np.unique(x))}; "
                       "widen the compute range (more runs or checkpoints)")
    return x, y


def fit_power_law(x, y, weights=None, what: str = "power-law fit") -> PowerLaw:
    """Least squares of ln y on ln x, optionally weighted (weights = 1/σ² of ln y)."""
    x, y = _check(x, y, what)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=np.float64)
    lx, ly = np.log(x), np.log(y)
    mx = np.sum(w * lx) / np.sum(w)
    my = np.sum(w * ly) / np.sum(w)
    slope = np.sum(w * (lx - mx) * (ly - my)) / np.sum(w * (lx - mx) ** 2)
    return PowerLaw(coefficient=float(np.exp(my - slope * mx)), exponent=float(slope))


def fit_power_law_with_floor(x, y, what: str = "power-law fit with floor") -> PowerLaw:
    """``y = E + c x^e`` minimising the squared error of ln y; 0 <= E < min(y).

    The floor E is profiled (for each E, ln(y - E) on ln x is linear), then all three
    parameters are polished jointly.
    """
    x, y = _check(x, y, what)
    if len(x) < 4:
        raise FitError(f"{what}: needs at least 4 points, got {len(x)}")
    lx, ly, ymin = np.log(x), np.log(y), float(y.min())

    def residuals(params):
        e_floor, log_c, expo = params
        pred = e_floor + np.exp(log_c + expo * lx)
        return np.log(np.maximum(pred, 1e-300)) - ly

    def profiled(e_floor):
        law = fit_power_law(x, y - e_floor, what=what)
        return np.sum(residuals((e_floor, np.log(law.coefficient), law.exponent)) ** 2), law

    grid = ymin * np.linspace(0.0, 0.995, 200)
    costs = [profiled(e)[0] for e in grid]
    e0 = float(grid[int(np.argmin(costs))])
    law0 = profiled(e0)[1]
    res = optimize.least_squares(
        residuals, x0=(e0, np.log(law0.coefficient), law0.exponent),
        bounds=([0.0, -np.inf, -np.inf], [ymin * (1 - 1e-9), np.inf, np.inf]))
    e_floor, log_c, expo = (float(v) for v in res.x)
    return PowerLaw(coefficient=float(np.exp(log_c)), exponent=expo, irreducible=e_floor)
