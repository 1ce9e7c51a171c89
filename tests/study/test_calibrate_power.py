"""The report's MDE and the calibration's power come from one noise model: on a fixture study, the
simulated power at the study's own MDE is the power its noise model (fit.power) states."""

import json

import numpy as np
import pytest

from linscale_jax import contract
from linscale_jax.fit.synthetic_study import study_table
from linscale_jax.study import files
from linscale_jax.study.calibrate import simulate
from linscale_jax.study.scaling import verdicts

LINEAR = ("tnl", "hgrn2")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A finished study's findings.json and fit table: 3 archs x 5 sizes x 12 checkpoints, two
    replicate seeds of the smallest and the largest size."""
    wd = tmp_path_factory.mktemp("study")
    t = study_table({"llama": 0.0, "tnl": 0.02, "hgrn2": -0.01}, points=12, ckpt_sd=0.008, run_sd=0.02,
                    replicates={0: 3, 4: 3}, seed=4)
    (wd / files.STUDY_FIT).mkdir()
    rows = [dict(arch=t.arch[i], run=t.run[i], step=int(t.step[i]), n_params=float(t.n_params[i]),
                 tokens=float(t.tokens[i]), flops=float(t.flops[i]), loss=float(t.loss[i])) for i in range(len(t.loss))]
    contract.write_table_csv(rows, wd / files.STUDY_FIT / files.fit_table_name("val_loss", True))
    tabs = verdicts.load_tables([f"val_loss={wd / files.STUDY_FIT / 'table.csv'}"])
    found = verdicts.judge_all(tabs, n_boot=100, holdout=False, linear=LINEAR)
    found.update(n_boot=100, design=dict(fit_min_step=0))
    (wd / files.FINDINGS_JSON).write_text(json.dumps(verdicts.plain(found)))
    return str(wd), verdicts.plain(found)


def test_simulated_power_at_the_mde_is_the_models(study):
    wd, found = study
    rows = found["by_estimator"]["val_loss"]["equal_compute"]["archs"]
    assert all(r["power_model"]["df"] == 12 and r["power_model"]["c"] > 0 for r in rows.values())
    effect = float(np.median([r["mde"] for r in rows.values()]))
    model = simulate.study_power(found, effect)
    assert 0.7 < model < 0.9  # the MDEs are where the model's power is 80%
    f, des, linear = simulate.load_design(wd)
    counts, got = simulate.case_counts(f, des, linear, simulate.CASES.index("one arch lower"), 32, effect, 100,
                                       scenarios=simulate.SCENARIOS[:1])
    c = counts["1x offset"]
    simulated = c["better"] / sum(c.values())
    assert sum(c.values()) == 32 * len(LINEAR)
    assert simulated == pytest.approx(model, abs=0.15)
    # the simulated studies' own reports state the same power for themselves
    own = np.mean([x[2] for per in got["1x offset"].values() for x in per])
    assert own == pytest.approx(simulated, abs=0.15)
    # and a null is resolved rarely: the same model is not too narrow
    counts, _ = simulate.case_counts(f, des, linear, 0, 10, effect, 100, scenarios=simulate.SCENARIOS[:1])
    c = counts["1x offset"]
    assert (c["better"] + c["worse"]) / sum(c.values()) <= 0.15
