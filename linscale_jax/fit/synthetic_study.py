"""Synthetic study tables with a known answer, for testing study.verdicts.

    table = study_table(offsets={"llama": 0.0, "tnl": -0.1}, ckpt_sd=0.01, run_sd=0.025, seed=0)

Every arch follows one law L(N, D) = E + A/N^α + B/D^β (fit.synthetic.Law) plus its `offset` (nats,
the same at every N and D), on the study's design: `sizes` (non-embedding N), every size trained on
the same `tokens`, `points` checkpoints per run spaced evenly in steps after the first `skip`; each
run gets one offset ~ N(0, run_sd) (seed-to-seed spread) and each checkpoint an independent
N(0, ckpt_sd) error. `replicates` {size index: seeds} adds replicate runs (other seeds) of a size.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.fit.synthetic import Law
from linscale_jax.fit.table import Table, from_columns
from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN, TABLE_COLUMNS

# A miniature of the cpu preset: losses ≈ 2.5 .. 1.9 nats over 0.9 decades of N at 2.1M tokens.
STUDY_LAW = Law(E=1.0, A=25.0, B=29.0, alpha=0.34, beta=0.28)
STUDY_SIZES = (3.8e4, 6.0e4, 9.0e4, 1.5e5, 3.3e5)


def study_table(offsets: dict, *, law: Law = STUDY_LAW, sizes=STUDY_SIZES, tokens: float = 2.1e6,
                points: int = 16, skip: float = 1 / 16, ckpt_sd: float = 0.01, run_sd: float = 0.025,
                replicates: dict | None = None, seed: int = 0,
                flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN) -> Table:
    rng = np.random.default_rng(seed)
    cols = {k: [] for k in TABLE_COLUMNS}
    frac = np.linspace(skip, 1.0, points) if points > 1 else np.array([1.0])
    for arch, off in offsets.items():
        for i, n in enumerate(sizes):
            for s in range((replicates or {}).get(i, 1)):
                d = tokens * frac
                loss = law.loss(n, d) + off + rng.normal(0, run_sd) + rng.normal(0, ckpt_sd, len(d))
                run = f"{arch}-{i}" + (f"-seed{s}" if s else "")
                cols["arch"] += [arch] * len(d)
                cols["run"] += [run] * len(d)
                cols["step"] += list(np.round(frac * 1000).astype(int))
                cols["n_params"] += [n] * len(d)
                cols["tokens"] += list(d)
                cols["flops"] += list(flops_per_param_token * n * d)
                cols["loss"] += list(loss)
    return from_columns("synthetic study", **cols)
