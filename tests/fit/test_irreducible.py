"""E's profile on planted laws: a ladder three decades wide identifies the planted E (the set of E
not rejected holds it and excludes E's lower bound); one decade, the main job's span, does not."""

import numpy as np

from linscale_jax.fit import bootstrap as bs
from linscale_jax.fit import irreducible
from linscale_jax.fit.synthetic import Law, planted_table

LAW = Law(E=1.0, A=25.0, B=29.0, alpha=0.34, beta=0.28)  # the miniature's scale: losses 1.4-3 nats
SD = bs.SeedSd(0.01, 8, "planted")


def _profile(lo, hi):
    t = planted_table(LAW, sizes=np.geomspace(lo, hi, 5), points_per_run=12, tokens_per_param=(3.0, 250.0),
                      noise=0.002, seed=0)
    return irreducible.profile(bs.curves_of(t), SD)


def test_a_wide_ladder_identifies_e_and_one_decade_does_not():
    wide = _profile(1e4, 1e7)
    lo, hi = wide["not_rejected"]
    assert wide["identified"] and lo <= LAW.E <= hi and wide["p"][0] <= irreducible.LEVEL  # no floor: rejected
    narrow = _profile(2.5e4, 2.3e5)
    lo, hi = narrow["not_rejected"]
    assert not narrow["identified"] and lo == narrow["grid"][0] and hi >= LAW.E  # E = 0 fits as well
    assert len(narrow["grid"]) == len(narrow["p"]) == irreducible.GRID_POINTS + 1
