"""The prediction's outcome from its rows: the verdicts (within, inside, whether N_opt wins) and the
target's chance before training (the Poisson binomial over each arch's N_opt)."""

import numpy as np
import pytest

from linscale_jax.study.predict import outcome


def _case(errors, inside, wins_gap=(0.2, 0.2)):
    fc, rows = {"archs": {}}, []
    for i, (e, ok) in enumerate(zip(errors, inside)):
        a = f"a{i}"
        fc["archs"][a] = {}
        for j, gap in enumerate((wins_gap[0], 0.0, wins_gap[1])):
            pred = 1.5
            rows.append(dict(arch=a, size=f"s{j}", predicted=pred, ci_low=pred - (0.1 if ok else 0.001),
                             ci_high=pred + (0.1 if ok else 0.001), actual=pred + e + gap, predicted_optimum=j == 1))
    return fc, rows


def test_the_verdicts():
    from linscale_jax.fit.bootstrap import SeedSd

    sd = SeedSd(0.005, 20, "measured")
    v = outcome.judge(*_case([0.01, -0.02, 0.0, 0.1], [True, True, True, True]), sd, 0.05, 0.03)
    assert v["summary"]["overall"] == "met: 3 of 4 archs" and v["archs"]["a3"]["within"] is False
    v = outcome.judge(*_case([0.01, -0.02, 0.01, 0.01], [True, True, False, False]), sd, 0.05, 0.03)
    assert v["summary"]["overall"] == "not met: 2 of 4 archs" and v["archs"]["a2"]["inside"] is False
    fc, rows = _case([0.0, 0.1, 0.0, 0.0], [True] * 4)
    for r in rows:
        r["actual"] = None if r["arch"] in ("a2", "a3") else r["actual"]
    assert outcome.judge(fc, rows, sd, 0.05, 0.03)["summary"]["overall"].startswith("not judged: 2 arch(s) measured")
    rows = [dict(r, actual=None) if r["arch"] == "a3" else r for r in _case([0.0, 0.1, 0.1, 0.0], [True] * 4)[1]]
    assert outcome.judge(fc, rows, sd, 0.05, 0.03)["summary"]["overall"] == (
        "not met: 1 of 3 measured archs, so at most 2 of 4 (the target counts 3)")  # one arch left cannot save it
    rows = [dict(r, actual=None) if r["arch"] == "a3" else r for r in _case([0.0] * 4, [True] * 4)[1]]
    assert outcome.judge(fc, rows, sd, 0.05, 0.03)["summary"]["overall"] == (
        "met: 3 of 3 measured archs, whatever the other 1 give")
    v = outcome.judge(*_case([0.0], [True], wins_gap=(-0.2, 0.2)), sd, 0.05, 0.03)
    assert v["archs"]["a0"]["wins"]["verdict"] == "loses" and v["archs"]["a0"]["wins"]["lowest_actual"] == "s0"
    v = outcome.judge(*_case([0.0], [True], wins_gap=(0.001, -0.001)), sd, 0.05, 0.03)
    assert v["archs"]["a0"]["wins"]["verdict"] == "equivalent"
    assert v["summary"]["chance"] is None  # a prediction stored without p_met


def test_the_targets_chance_before_training():
    """P(at least 3 of 4 archs meet the check) from each N_opt's p_met (the Poisson binomial)."""
    assert outcome.at_least([0.5] * 4, 3) == pytest.approx(5 / 16)
    assert outcome.at_least([1.0, 1.0, 0.0, 0.0], 3) == 0.0 and outcome.at_least([1.0, 1.0, 1.0, 0.0], 3) == 1.0
    assert outcome.at_least([0.9, 0.8, 0.7, 0.6], 0) == pytest.approx(1.0)
    ps = [0.9, 0.8, 0.7, 0.6]
    exact = sum(np.prod([p if (m >> i) & 1 else 1 - p for i, p in enumerate(ps)])
                for m in range(16) if bin(m).count("1") >= 3)
    assert outcome.at_least(ps, 3) == pytest.approx(exact)
    fc = {"archs": {f"a{i}": {"rungs": [dict(predicted_optimum=False, p_met=0.0),
                                        dict(predicted_optimum=True, p_met=p)]} for i, p in enumerate(ps)}}
    c = outcome.chance(fc)
    assert c["needed"] == 3 and c["overall"] == pytest.approx(exact) and c["archs"]["a3"] == 0.6
