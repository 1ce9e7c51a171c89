"""The study's automatic comparisons on planted laws: the better arch is found, the law-based interval
is two-sided and excludes zero for a clear gap, the envelope interval is one-sided by construction."""

import numpy as np

from fit import approach1
from fit.synthetic import Law, planted_table
from fit.table import from_columns
from linscale_jax.study import compare

COLS = ("arch", "run", "step", "n_params", "tokens", "flops", "loss")


def two_archs():
    sizes = np.geomspace(1e6, 1e8, 6)
    good = planted_table(Law(E=1.8), arch="good", sizes=sizes, seed=1)
    bad = planted_table(Law(E=2.0), arch="bad", sizes=sizes, seed=2)
    return from_columns("two", **{c: np.concatenate([getattr(good, c), getattr(bad, c)]) for c in COLS})


def test_law_and_envelope_comparisons_find_the_better_arch():
    table = two_archs()
    env = compare.loss_at_common_compute(table, n_boot=60, seed=0)
    law = compare.law_at_common_compute(table, include_clamped=False, n_boot=60, seed=0)
    for out in (env, law):
        assert out["best"] == "good" and out["runner_up"] == "bad" and out["p_best"] > 0.95
        d, lo, hi = out["diff"]
        assert 0.1 < d < 0.3 and 0 < lo <= hi  # E differs by 0.2; the gap is resolved
    assert law["compute"] == env["compute"] == compare.common_compute(table) and law["unfitted"] == {}
    for a in ("good", "bad"):
        v, lo, hi = env["by_arch"][a]
        assert lo == v < hi  # the envelope can only rise when runs are dropped
        v, lo, hi = law["by_arch"][a]
        assert lo < v < hi  # the refitted law moves both ways
        fitted = approach1.fit(table.select(a)).laws["L_C"]
        assert v == float(fitted(law["compute"]))  # the arch's own approach-1 L(C) at the common compute


def test_law_comparison_lists_archs_it_cannot_fit():
    table = two_archs()
    few = from_columns("few", **{c: getattr(table, c)[table.arch == "good"][:60] for c in COLS})  # 2 runs
    out = compare.law_at_common_compute(few, include_clamped=False, n_boot=10)
    assert out["by_arch"] == {} and "good" in out["unfitted"] and "needs at least 3 runs" in out["unfitted"]["good"]
