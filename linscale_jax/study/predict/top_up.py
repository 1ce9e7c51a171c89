"""The ladder completed for the prediction: replicate seeds at the sizes its laws should rest on
(study.replicates) that the ladder did not train are trained in P/ladder, beside links to the
ladder's own runs, and P/ladder is joined as a scaling study of the ladder's preset with those
replicates. The ladder's directory is only read.

    ext = extended(study, lad)           # the ladder's preset with study.replicates added; None: nothing to add
    todo = pending(study, lad, P)        # P/ladder prepared (links, plan.txt); the added runs still to process
    lad = completed(study, lad, P, log)  # P/ladder joined (again when a run changed since) and opened

The added runs are the runs the ladder's own preset plans with those replicates (the same configs, so
the same losses as a study that trained them from the start), processed as the ladder processes its
runs (every checkpoint's val_loss, every cooldown branch). A replicate size's curve in the laws' table
is then the mean of more seeds: the laws' refits spread less where the prediction extrapolates from.
"""

from __future__ import annotations

import copy
import os

from linscale_jax.contract import split_list
from linscale_jax.study import files
from linscale_jax.study.predict.ladder import Ladder, PredictError, open_at


def _wanted(study) -> tuple[list[str], int]:
    rep = study.get("replicates", None)
    if rep is None:
        return [], 0
    sizes = split_list(str(rep.get("sizes", "") or ""), "study.replicates.sizes") if str(rep.get("sizes", "")) else []
    seeds = rep.get("seeds", 1)
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 0:
        raise PredictError(f"study.replicates.seeds={seeds!r}: the replicate seeds per size must be a whole number "
                           ">= 0 (0: predict from the ladder as it is)")
    return (sizes, seeds) if seeds else ([], 0)


def extended(study, lad: Ladder):
    """The ladder's preset with study.replicates (sizes of the ladder, seeds each) added to its own
    replicates (sizes: the union, seeds: the larger), or None when it plans no run the ladder lacks."""
    from linscale_jax.study.scaling import plan as plan_lib

    sizes, seeds = _wanted(study)
    if not sizes:
        return None
    own = split_list(str(lad.study.sizes), "study.sizes")
    unknown = [s for s in sizes if s not in own]
    if unknown:
        raise PredictError(f"study.replicates.sizes names {', '.join(unknown)}, not a size of the ladder "
                           f"{lad.workdir} (its sizes: {', '.join(own)}); name some of those, or pass "
                           "--config.replicates.sizes= to predict from the ladder as it is")
    have = {s: len(plan_lib.replicate_seeds(lad.study, s)) - 1 for s in own}
    if all(have[s] >= seeds for s in sizes):
        return None
    ext = copy.deepcopy(lad.study)
    named = [s for s in own if s in sizes or have[s]]
    ext.replicates.sizes = ",".join(named)
    ext.replicates.seeds = max([seeds, *have.values()])
    return ext


def ladder_dir(workdir: str) -> str:
    return files.study_path(workdir, files.PREDICT_LADDER)


def _plan(ext, workdir: str) -> list:
    from linscale_jax.study.scaling import runner

    return runner.plan(ext, ladder_dir(workdir))


def is_added(run) -> bool:
    """Whether a run is one the prediction adds to its ladder (it lives in P/ladder/runs/)."""
    return os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(run.workdir)))) == files.PREDICT_LADDER


def processed(run) -> bool:
    """Whether a scaling run was processed to its end once (its timing row is written last)."""
    return os.path.exists(os.path.join(run.workdir, files.TIMING))


def pending(study, lad: Ladder, workdir: str) -> list:
    """The runs P/ladder adds to the ladder that are not processed yet ([] when none is added): P/ladder
    made first (plan.txt of the completed ladder; runs/<name> a link to each of the ladder's own runs)."""
    from linscale_jax.study.scaling import runner

    ext = extended(study, lad)
    if ext is None:
        return []
    wd = ladder_dir(workdir)
    runs = _plan(ext, workdir)
    own = {r.name for r in lad.runs}
    os.makedirs(files.study_path(wd, files.STUDY_RUNS), exist_ok=True)
    for r in (r for r in runs if r.name in own):
        target = os.path.abspath(files.study_run_dir(lad.workdir, r.name))
        if os.path.islink(r.workdir) and os.readlink(r.workdir) != target:
            os.remove(r.workdir)  # a link to the ladder's former place, or to another ladder
        elif os.path.exists(r.workdir) and not os.path.islink(r.workdir):
            raise PredictError(f"{r.workdir} is a directory, not a link to the ladder's run {target}; remove it "
                               f"(the ladder's own runs are read from {lad.workdir}) and re-run")
        if not os.path.lexists(r.workdir):
            os.symlink(target, r.workdir)
    runner.start(ext, wd, runs)
    return [r for r in runs if r.name not in own and not processed(r)]


def _stale(wd: str, ladder_wd: str, added: list) -> bool:
    """Whether P/ladder's join is missing or older than a run it reads or the ladder's own join."""
    found = files.study_path(wd, files.FINDINGS_JSON)
    if not os.path.exists(found):
        return True
    t = os.path.getmtime(found)
    inputs = [files.study_path(ladder_wd, files.FINDINGS_JSON)] + [os.path.join(r.workdir, files.TIMING) for r in added]
    return any(os.path.exists(p) and os.path.getmtime(p) > t for p in inputs)


def completed(study, lad: Ladder, workdir: str, ctx) -> Ladder:
    """The ladder the laws predict from: `lad` itself when study.replicates adds nothing, else P/ladder
    (every added run processed: pending() is []) joined as a scaling study of the extended preset when
    its join is missing or stale, and opened. ctx: the experiment's Context (its log, the join's)."""
    from linscale_jax.study.scaling import runner

    ext = extended(study, lad)
    if ext is None:
        return lad
    wd = ladder_dir(workdir)
    runs = _plan(ext, workdir)
    own = {r.name for r in lad.runs}
    added = [r for r in runs if r.name not in own]
    missing = [r.name for r in added if not processed(r)]
    if missing:
        raise PredictError(f"the ladder's added replicate runs {', '.join(missing)} are not trained in {wd}; re-run "
                           "the same command without --join_only to train them")
    if _stale(wd, lad.workdir, added):
        ctx.log(f"[predict] the ladder completed in {wd}: {len(added)} replicate run(s) added to {lad.workdir}'s "
                f"{len(own)}; joining it")
        joined = runner.join(ext, runs, wd, ctx)
        runner.report(ext, wd, joined, ctx)
    out = open_at(wd, ext, f"{study.ladder_preset} with study.replicates", lad.estimator)
    out.source, out.added = lad.workdir, tuple(r.name for r in added)
    return out
