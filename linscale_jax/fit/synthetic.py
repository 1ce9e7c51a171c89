"""Training curves drawn from a known law, for planted-truth tests and demos of the CLI.

``L(N, D) = E + A / N**alpha + B / D**beta`` with compute ``C = k * N * D`` (k = 6). Every run is
one model size N with checkpoints log-spaced in D; loss gets multiplicative log-normal noise.
The compute-optimal allocation is known in closed form (``optimal_exponents``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from linscale_jax.fit.table import Table, from_columns
from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN, TABLE_COLUMNS


@dataclasses.dataclass(frozen=True)
class Law:
    E: float = 1.8
    A: float = 480.0
    B: float = 2100.0
    alpha: float = 0.34
    beta: float = 0.37

    def loss(self, n, d):
        return self.E + self.A / np.asarray(n) ** self.alpha + self.B / np.asarray(d) ** self.beta

    def optimal_exponents(self) -> dict[str, float]:
        """N_opt ∝ C^a, D_opt ∝ C^b, and L_opt(C) - E ∝ C^-(alpha*beta/(alpha+beta))."""
        s = self.alpha + self.beta
        return {"N_opt_C": self.beta / s, "D_opt_C": self.alpha / s,
                "L_C_reducible": -self.alpha * self.beta / s}


def planted_table(law: Law = Law(), *, arch: str = "planted", sizes=None, points_per_run: int = 30,
                  tokens_per_param=(0.5, 400.0), noise: float = 0.003, seed: int = 0,
                  flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN) -> Table:
    """One arch's runs: ``sizes`` (N values), each with checkpoints at D = N * tokens_per_param."""
    rng = np.random.default_rng(seed)
    sizes = np.geomspace(1e6, 3e8, 12) if sizes is None else np.asarray(sizes, dtype=np.float64)
    cols = {k: [] for k in TABLE_COLUMNS}
    for n in sizes:
        d = n * np.geomspace(*tokens_per_param, points_per_run)
        loss = law.loss(n, d) * np.exp(noise * rng.standard_normal(points_per_run))
        cols["arch"] += [arch] * points_per_run
        cols["run"] += [f"{arch}-{n:.3g}"] * points_per_run
        cols["step"] += list(range(1, points_per_run + 1))
        cols["n_params"] += [n] * points_per_run
        cols["tokens"] += list(d)
        cols["flops"] += list(flops_per_param_token * n * d)
        cols["loss"] += list(loss)
    return from_columns(f"planted({arch})", **cols)
