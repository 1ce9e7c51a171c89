"""The tuning grid's analysis: per-size optima, lr*(N) and batch*(N) as power laws with intervals.

    cells = [Cell(arch, size, k, batch, beta2, seed), ...]; loss = {cell: final loss}
    opt = size_optimum(cells_of_one_size, loss)     # best cell, lr* and batch* (parabola vertices)
    fit = fit_rules(by_size, n_params, sigma)       # power laws lr*(N), batch*(N), bootstrap intervals

A cell is one training run: lr = lr_base·2^k (a factor-2 grid), `batch` sequences per step at a
fixed token budget, AdamW β2. Per size, the best cell is the lowest loss; lr* is the vertex of a
parabola in log2 lr through the best cell and its two lr neighbours on the same (batch, β2) line
(kept at the best cell's k when a neighbour is missing or diverged; at most one grid step away);
batch* is the vertex in log2 batch through the best batch (each batch's lowest loss over lr) and its
neighbours. Laws are least squares of ln lr* (ln batch*) on ln N. Intervals: a parametric bootstrap
that adds N(0, sigma) to every cell's loss (sigma: the seed-to-seed sd measured on replicate cells),
re-selects every optimum and refits (95 % percentile intervals); a law fitted to 2 sizes passes
through both points.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from linscale_jax.fit.powerlaw import fit_power_law


class Cell(NamedTuple):
    arch: str
    size: str
    k: int  # lr = lr_base · 2**k
    batch: int  # sequences per step
    beta2: float
    seed: int = 0


def lr_of(k: int, lr_base: float) -> float:
    return float(f"{lr_base * 2.0 ** k:.6g}")


def grid_k(lr: float, lr_base: float) -> int:
    """The grid step nearest to `lr` in log space."""
    return int(round(math.log2(lr / lr_base)))


def vertex(x: list[float], y: list[float], at: int) -> float:
    """Vertex of the parabola through (x[at-1..at+1], y[...]), clipped to [x[at-1], x[at+1]];
    x[at] when a neighbour is missing or not finite or the points do not curve upward."""
    if at <= 0 or at >= len(x) - 1 or not np.all(np.isfinite(y[at - 1:at + 2])):
        return float(x[at])
    (x0, x1, x2), (y0, y1, y2) = x[at - 1:at + 2], y[at - 1:at + 2]
    # Lagrange parabola's vertex for unequal spacing
    d = (x0 - x1) * (x0 - x2) * (x1 - x2)
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / d
    b = (x2 ** 2 * (y0 - y1) + x1 ** 2 * (y2 - y0) + x0 ** 2 * (y1 - y2)) / d
    if a <= 0:
        return float(x1)
    return float(np.clip(-b / (2 * a), x0, x2))


class Optimum(NamedTuple):
    best: Cell
    loss: float
    log2_lr: float  # vertex, in log2 of lr / lr_base (the grid's k)
    log2_batch: float  # vertex, in log2 of the batch
    lr_edge: bool  # the best k is the lowest or highest tried on its line: lr* is a bound
    batch_edge: bool


def size_optimum(cells: list[Cell], loss: dict) -> Optimum:
    """The optimum of one (arch, size) from its seed-0 cells (see module)."""
    mine = [c for c in cells if c.seed == 0 and c in loss and np.isfinite(loss[c])]
    if not mine:
        raise ValueError(f"no finite loss among {len(cells)} cells; every run diverged or none finished")
    best = min(mine, key=lambda c: loss[c])
    line = sorted((c for c in mine if (c.batch, c.beta2) == (best.batch, best.beta2)), key=lambda c: c.k)
    at = line.index(best)
    ks = [c.k for c in line]
    log2_lr = vertex([float(k) for k in ks], [loss[c] for c in line], at)
    if at > 0 and ks[at - 1] != best.k - 1 or at < len(line) - 1 and ks[at + 1] != best.k + 1:
        log2_lr = float(best.k)  # a gap in the line: no parabola across it
    per_batch: dict[int, float] = {}
    for c in mine:
        per_batch[c.batch] = min(per_batch.get(c.batch, np.inf), loss[c])
    bs = sorted(per_batch)
    bat = bs.index(best.batch)
    log2_b = vertex([math.log2(b) for b in bs], [per_batch[b] for b in bs], bat)
    return Optimum(best, float(loss[best]), log2_lr, log2_b, lr_edge=at in (0, len(line) - 1),
                   batch_edge=bat in (0, len(bs) - 1))


def seed_sd(loss: dict) -> tuple[float, int]:
    """Seed-to-seed sd of the final loss from replicate cells (seed >= 1) and their seed-0 twins:
    sqrt(mean((l_s - l_0)^2) / 2) over pairs (pairs of one replicate each); (nan, 0) without pairs."""
    diffs = []
    for c, v in loss.items():
        twin = c._replace(seed=0)
        if c.seed and twin in loss and np.isfinite(v) and np.isfinite(loss[twin]):
            diffs.append(v - loss[twin])
    if not diffs:
        return float("nan"), 0
    return float(np.sqrt(np.mean(np.square(diffs)) / 2)), len(diffs)


def _law(n: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    law = fit_power_law(n, y, what="tuning rule")
    return law.coefficient, law.exponent


def fit_rules(cells: dict, loss: dict, n_params: dict, lr_base: float, sigma: float,
              bootstrap: int = 1000, seed: int = 0) -> dict:
    """Power laws of lr* and batch* in N over the sizes of one arch.

    cells: {size: [Cell, ...]}; n_params: {size: N}; returns {"sizes", "n", "lr": law, "batch": law,
    "optima": {size: Optimum}} where a law is {"coefficient", "exponent", "coefficient_ci",
    "exponent_ci", "values", "values_ci"} (values: the per-size optimum; _ci: 95 % bootstrap
    intervals, None without a finite sigma or bootstrap=0)."""
    sizes = sorted(cells, key=lambda s: n_params[s])
    if len(sizes) < 2:
        raise ValueError(f"a rule needs at least 2 sizes, got {sizes}")
    n = np.array([float(n_params[s]) for s in sizes])
    optima = {s: size_optimum(cells[s], loss) for s in sizes}

    def laws(opts):
        lr = np.array([lr_base * 2.0 ** opts[s].log2_lr for s in sizes])
        b = np.array([2.0 ** opts[s].log2_batch for s in sizes])
        return (*_law(n, lr), *_law(n, b), lr, b)

    lc, le, bc, be, lr, b = laws(optima)
    out = {"sizes": sizes, "n": n.tolist(), "optima": optima,
           "lr": {"coefficient": lc, "exponent": le, "values": lr.tolist()},
           "batch": {"coefficient": bc, "exponent": be, "values": b.tolist()}}
    draws = []
    if bootstrap and np.isfinite(sigma) and sigma > 0:
        rng = np.random.default_rng(seed)
        keys = [c for s in sizes for c in cells[s] if c in loss]
        base = np.array([loss[c] for c in keys])
        for _ in range(int(bootstrap)):
            noisy = dict(zip(keys, base + rng.normal(0.0, sigma, len(keys))))
            draws.append(laws({s: size_optimum(cells[s], noisy) for s in sizes}))
    for j, name in ((0, "lr"), (2, "batch")):
        law = out[name]
        if draws:
            coef = np.array([d[j] for d in draws])
            expo = np.array([d[j + 1] for d in draws])
            vals = np.array([d[4 + j // 2] for d in draws])
            law["coefficient_ci"] = np.percentile(coef, [2.5, 97.5]).tolist()
            law["exponent_ci"] = np.percentile(expo, [2.5, 97.5]).tolist()
            law["values_ci"] = np.percentile(vals, [2.5, 97.5], axis=0).T.tolist()
        else:
            law["coefficient_ci"] = law["exponent_ci"] = law["values_ci"] = None
    return out


def law_value(law: dict, n: float) -> float:
    return float(law["coefficient"]) * float(n) ** float(law["exponent"])
