"""The ladder the predict tests run on: a finished study of the main job's protocol on a mixed ladder
(depth 2 and 4) whose laws' table holds a planted law plus a seed offset and checkpoint noise, no
training; and what its tests share.

    from helpers.predict_ladder import Ctx, fake_results, ladder, lad, planned, predict_study  # fixtures too
    study = predict_study(ladder_dir, seeds=2)   # the predict preset on that ladder, llama alone
"""

import json
from pathlib import Path

import numpy as np
import pytest

from linscale_jax import contract
from linscale_jax.study import files
from linscale_jax.study.predict import experiment
from linscale_jax.study.predict.ladder import open_ladder

ROOT = Path(__file__).resolve().parents[2]
LAW = dict(E=0.68, A=5.75, alpha=0.206, B=63.9, beta=0.364)  # near the main job's llama fit
SHORT = "hgrn2"  # an arch the fixture gives two sizes only


def law(n, d):
    return LAW["E"] + LAW["A"] / n ** LAW["alpha"] + LAW["B"] / d ** LAW["beta"]


def preset(name: str):
    from linscale_jax.study.presets import preset as load

    return load(name)


# The ladder these tests predict from: the main job's protocol on a mixed ladder (depth 2 and 4) whose
# largest size has depth 4, so the family of rungs is the four-layer one; under the grid's rule, whose
# range holds tnl's d16l2 and d16 (the default rule's tnl starts at d32l2).
MIXED = """from linscale_jax.study.presets import preset


def get_config():
    c = preset("cpu")
    c.sizes = "d16l2,d16,d32l2,d32,d48"
    c.tokens_by_size = ""
    c.overrides.optim.rule = "grid"
    c.replicates.update(sizes="smallest", seeds=2)
    return c
"""


def predict_study(ladder: str, **changes):
    s = preset(str(ROOT / "configs" / "study" / "predict.py"))
    s.replicates.sizes = ""  # the ladder as it is (test_predict_top_up completes one)
    s.update(dict(dict(ladder_from=ladder, ladder_preset=str(Path(ladder) / "mixed.py"), archs="llama",
                       bootstrap=20), **changes))
    return s


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    """A finished study of MIXED (DIR/mixed.py) whose laws' table holds the planted law plus a seed
    offset and checkpoint noise; hgrn2 keeps two sizes."""
    from linscale_jax.study.scaling import plan, runner

    wd = tmp_path_factory.mktemp("ladder")
    (wd / "mixed.py").write_text(MIXED)
    study = preset(str(wd / "mixed.py"))
    runs = plan.build_plan(study, str(wd))
    runner.start(study, str(wd), runs)
    rng, rows = np.random.default_rng(0), []
    for r in runs:
        if r.arch == SHORT and r.size not in ("d32", "d48"):
            continue
        steps = np.arange(512, r.steps + 1, 512)
        d = steps * r.tokens / r.steps
        loss = law(r.n_params, d) + rng.normal(0, 0.004) + rng.normal(0, 0.002, len(d))
        rows += [dict(arch=r.arch, run=r.name, step=int(s), n_params=r.n_params, tokens=float(t),
                     flops=float(r.flops * t / r.tokens), loss=float(x), seed=r.seed) for s, t, x in zip(steps, d, loss)]
    (wd / files.STUDY_FIT).mkdir()
    contract.write_table_csv(rows, wd / files.STUDY_FIT / "table.csv")
    pool = dict(sd=0.005, df=4.0, source="pooled: 4 archs, 4 df")
    (wd / files.FINDINGS_JSON).write_text(json.dumps(dict(estimators=["val_loss", "cooldown"], margin=0.05,
                                                          by_estimator={"val_loss": dict(seed_sd_pooled=pool)})))
    return str(wd), runs


@pytest.fixture(scope="module")
def lad(ladder):
    return open_ladder(predict_study(ladder[0]))


@pytest.fixture(scope="module")
def planned(ladder, tmp_path_factory):
    P = str(tmp_path_factory.mktemp("predict"))
    study = predict_study(ladder[0])
    return study, P, experiment.plan(study, P)




def fake_results(run, loss: float):
    ev = Path(run.workdir) / "eval"
    ev.mkdir(parents=True, exist_ok=True)
    (ev / "results.jsonl").write_text(json.dumps(dict(task="val_loss", arch=run.arch, run=run.name, step=run.steps,
                                                      val_loss=loss)) + "\n")


class Ctx:
    runs_s, slots, options = 12.0, 2, None

    def __init__(self):
        self.lines = []

    def log(self, line):
        self.lines.append(line)
