"""The delta rule against flash-linear-attention's own pure-PyTorch references (fla-core 0.6.0:
`fla/ops/gated_delta_rule/naive.py`, recurrent and chunk forms, and `fla/ops/delta_rule/naive.py`
for the ungated rule), through the fixture tests/fixtures/delta_rule_fla.npz made outside the
repository (tests/fixtures/README.md says how). fla scales q by K^-1/2 inside its functions; ours
takes q as given, so the test passes q · K^-1/2. Layout [b, t, h, d], beta and g [b, t, h] are
fla 0.6.0's and ours alike. Gated: g from the fixture; ungated: log_decay=None against fla's g = 0
and its delta_rule_recurrence. pallas runs the kernels in TPU interpret mode (forward only)."""

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas import delta_rule

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "delta_rule_fla.npz"
TOL = 5e-6  # max |ours - fla| / max(1, max |fla|), float32 on both sides (measured <= 1e-6)


@pytest.fixture(scope="module")
def fla():
    return dict(np.load(FIXTURE))


@pytest.mark.parametrize("impl", ["reference", "xla", "pallas"])
@pytest.mark.parametrize("gated", [True, False])
def test_matches_fla_naive(fla, impl, gated):
    meta = json.loads(str(fla["meta_json"]))
    assert meta["fla_core"] == "0.6.0"
    q, k, v, beta, g, s0 = (jnp.asarray(fla[n]) for n in ("q", "k", "v", "beta", "g",
                                                           "initial_state"))
    scale = q.shape[-1] ** -0.5
    o, s = delta_rule(q * scale, k, v, beta, log_decay=g if gated else None, initial_state=s0,
                      return_final_state=True, impl=impl, chunk_size=16)
    tag = "gated" if gated else "ungated"
    forms = ("recurrent", "chunk") + (() if gated else ("delta",))
    for form in forms:
        o_ref, s_ref = fla[f"{tag}/o_{form}"], fla[f"{tag}/state_{form}"]
        for name, x, ref in (("o", o, o_ref), ("state", s, s_ref)):
            err = np.max(np.abs(np.asarray(x) - ref)) / max(1.0, np.max(np.abs(ref)))
            assert err < TOL, f"{impl} {tag} vs fla {form}: {name} error {err:.2e}"
    # the gate matters at these values: the gated and ungated references differ
    assert np.max(np.abs(fla["gated/o_recurrent"] - fla["ungated/o_recurrent"])) > 0.1
