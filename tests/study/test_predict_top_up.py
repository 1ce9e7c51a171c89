"""The prediction's ladder completed with the replicate runs study.replicates asks for and the ladder
lacks (predict.top_up): which runs are added and how the preset is extended, the added runs trained
in P/ladder beside links to the ladder's own runs (the ladder's directory only read), and the
completed ladder's laws reading the replicate means."""

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from linscale_jax.study import experiments, files
from linscale_jax.study.predict import experiment, top_up
from linscale_jax.study.predict.ladder import Ladder, PredictError
from linscale_jax.study.presets import preset
from helpers.predict_ladder import ladder, planned  # noqa: F401 (fixtures)
from helpers.study import write_preset


def _predict(ladder_dir: str, ladder_preset: str, sizes: str, seeds: int = 1):
    s = preset("predict")
    s.update(dict(ladder_from=ladder_dir, ladder_preset=ladder_preset, archs="tnl", bootstrap=20))
    s.replicates.update(sizes=sizes, seeds=seeds)
    return s


def _lad(study) -> Ladder:
    return Ladder(workdir="/nowhere", study=study, runs=[], findings={}, estimator="val_loss", count="non_embedding",
                  table="")


@pytest.mark.parametrize("own, sizes, seeds, want", [
    (("d96l2", 1), "d64l2,d80l2,d96l2", 1, ("d64l2,d80l2,d96l2", 1)),  # the main job completed to the 32-run design
    (("d64l2,d80l2,d96l2", 1), "d64l2,d80l2,d96l2", 1, None),  # the 32-run design: nothing to add
    (("d96l2", 1), "", 1, None),  # the ladder as it is
    (("d96l2", 1), "d64l2", 0, None),
    (("d96l2", 1), "d32l2", 2, ("d32l2,d96l2", 2)),  # sizes the union, seeds the larger
    (("d32l2,d48l2,d96l2", 2), "d96l2", 1, None),  # already more seeds than asked
])
def test_the_preset_is_extended_by_what_the_ladder_lacks(own, sizes, seeds, want):
    ladder = preset("cpu")
    ladder.replicates.update(sizes=own[0], seeds=own[1])
    ext = top_up.extended(_predict("/nowhere", "cpu", sizes, seeds), _lad(ladder))
    assert (None if ext is None else (str(ext.replicates.sizes), int(ext.replicates.seeds))) == want
    if ext is not None:  # nothing else of the ladder's protocol changes
        ext.replicates.update(sizes=ladder.replicates.sizes, seeds=ladder.replicates.seeds)
        assert ext.to_dict() == ladder.to_dict()


@pytest.mark.parametrize("sizes, seeds, message", [
    ("d64l2,d16", 1, "names d16, not a size of the ladder"),
    ("d64l2", -1, "study.replicates.seeds=-1"),
])
def test_a_replicate_the_ladder_cannot_have_is_one_line(sizes, seeds, message):
    with pytest.raises(PredictError, match=message):
        top_up.extended(_predict("/nowhere", "cpu", sizes, seeds), _lad(preset("cpu")))


def _tree(d: Path) -> dict:
    return {str(p.relative_to(d)): p.stat().st_mtime_ns for p in sorted(d.rglob("*"))}


def test_the_added_runs_train_in_the_prediction_and_the_laws_read_their_means(tmp_path):
    """A mini ladder (tnl, d32 d48 d64 of one layer, no replicate) trained and joined; the prediction
    asks for a replicate seed of d48 and d64: stage 1 plans those two runs alone, in P/ladder, where the
    ladder's own runs are links; once they are processed (as the ladder processes its runs) the completed
    ladder is joined in P/ladder and its laws' curves are the means of the two seeds. DIR is only read."""
    mini = write_preset(tmp_path, workers=1)
    D, P = tmp_path / "ladder", str(tmp_path / "P")
    experiments.run(preset(mini), str(D), log=lambda line: None)
    before = _tree(D)
    study = _predict(str(D), mini, "d48,d64")

    added = experiment.plan(study, P)  # stage 1
    assert [r.name for r in added] == ["tnl-d48-seed1", "tnl-d64-seed1"]
    assert all(top_up.is_added(r) and r.workdir == files.study_run_dir(top_up.ladder_dir(P), r.name) for r in added)
    assert added[0].config.train.seed == 1 and added[0].config.data.seed == 1 and not added[0].final
    for name in ("tnl-d32", "tnl-d48", "tnl-d64"):
        link = Path(files.study_run_dir(top_up.ladder_dir(P), name))
        assert link.is_symlink() and link.resolve() == (D / files.STUDY_RUNS / name).resolve()
    assert "complete the ladder" in experiment.dry_run(study, added)
    with pytest.raises(PredictError, match="not trained in"):  # --join_only before they train
        experiment.ladder_of(study, P)

    for r in added:
        experiment.process_run(study, r, log=lambda line: None)
    assert top_up.pending(study, experiment.open_ladder(study), P) == []
    lines = []
    lad = experiment.ladder_of(study, P, lines.append)
    assert lad.workdir == top_up.ladder_dir(P) and lad.source == str(D)
    assert lad.added == ("tnl-d48-seed1", "tnl-d64-seed1") and any("joining it" in x for x in lines)
    assert experiment.open_ladder(study).seed_sd().df == np.inf  # the ladder assumed its seed sd ...
    assert 1 <= lad.seed_sd().df < np.inf  # ... the completed ladder's replicates measure it

    rows = list(csv.DictReader(open(lad.table)))
    assert {r["run"] for r in rows} == {"tnl-d32", "tnl-d48", "tnl-d64", "tnl-d48-seed1", "tnl-d64-seed1"}
    curves = {round(c.n_params): c for c in lad.curves("tnl")}
    for size in ("d48", "d64"):
        mine = [r for r in rows if r["run"].startswith(f"tnl-{size}")]
        n = round(float(mine[0]["n_params"]))
        by_step = {}
        for r in mine:
            by_step.setdefault(int(r["step"]), []).append(float(r["loss"]))
        assert all(len(v) == 2 for v in by_step.values())
        np.testing.assert_allclose(curves[n].mean, [np.mean(by_step[s]) for s in sorted(by_step)], rtol=1e-12)

    again = []
    assert experiment.ladder_of(study, P, again.append).workdir == lad.workdir and again == []  # joined once
    assert _tree(D) == before  # the ladder's directory is only read

    # the ladder moved: its links follow it
    shutil.move(str(D), str(tmp_path / "moved"))
    moved = _predict(str(tmp_path / "moved"), mini, "d48,d64")
    assert top_up.pending(moved, experiment.open_ladder(moved), P) == []
    link = Path(files.study_run_dir(top_up.ladder_dir(P), "tnl-d32"))
    assert link.resolve() == (tmp_path / "moved" / files.STUDY_RUNS / "tnl-d32").resolve()
    link.unlink()
    link.mkdir()  # not a link: refused, nothing replaced
    with pytest.raises(PredictError, match="is a directory, not a link to the ladder's run"):
        top_up.pending(moved, experiment.open_ladder(moved), P)
    found = json.loads(Path(top_up.ladder_dir(P), files.FINDINGS_JSON).read_text())
    assert found["by_estimator"]["val_loss"]["seed_sd_pooled"]["df"] == lad.seed_sd().df
    assert os.path.exists(Path(top_up.ladder_dir(P), files.REPORT_MD))


def test_the_report_names_the_completed_ladder_and_the_added_runs_cost(planned):
    """report.lines on a join whose ladder was completed: the ladder's own directory, where it was
    completed, the sizes repeated, and the added runs' seconds in the cost section."""
    from helpers.predict_ladder import Ctx
    from linscale_jax.study.predict import report

    study, P, runs = planned
    joined = experiment.join(study, runs, P, Ctx())
    assert "completed in" not in "\n".join(report.lines(joined)) and joined["cost"]["added"] is None
    lad = joined["forecast"]["ladder"]
    lad.update(source="/the/ladder", workdir=f"{P}/ladder", added=["llama-d64l2-seed1", "tnl-d80l2-seed1"])
    joined["cost"]["added"] = dict(runs={}, seconds=125.0, trained=2)
    text = "\n".join(report.lines(joined))
    assert f"The ladder: `/the/ladder` (preset {study.ladder_preset}), completed in `{P}/ladder` with 2 replicate" in text
    assert "(at d64l2, d80l2: study.replicates)" in text
    assert f"The 2 replicate run(s) added to the ladder ({P}/ladder): their wall time" in text and "2m05s." in text
