"""A finished scaling study as the ladder a prediction starts from: its preset, runs, laws' inputs and
the family of sizes of its shape.

    lad = open_ladder(study)             # study.ladder_from (DIR), study.ladder_preset; one line if unfit
    lad.runs, lad.estimator, lad.count   # the ladder's runs (scaling.plan.Run), the laws' estimator and count
    lad.table                            # the fit table of that estimator (DIR/fit/table*.csv)
    curves, sd = lad.curves(arch), lad.seed_sd()    # one arch's replicate-mean curves, the pooled seed sd
    fam = lad.family(arch)               # [{"size", "n_params", "n_law", "flops_per_token", "layers", "d_model"}]

DIR must hold a finished study: findings.json (written last by its join), plan.txt and the laws'
fit table (fit/table.csv; with study.estimator, another of the ladder's estimators, that
estimator's table, fit/table_<estimator>.csv). The preset that ran it (study.ladder_preset, a packaged name or a file)
must plan the same runs: each run's train command in DIR/plan.txt is compared with the preset's (the
workdir aside), so the prediction trains under the ladder's own protocol (model file, overrides,
rule, batch, schedule, checkpoints, estimators, cooldown). The family of an arch: every size of
linscale_jax.models.sizes.LADDER whose built model (the preset's overrides applied) has the depth and
head dim of the ladder's largest size, one per width, ascending N.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re

from linscale_jax.errors import UserError
from linscale_jax.study import files

MIN_SIZES = 3  # a law of N from fewer sizes predicts nothing beyond them


class PredictError(UserError, ValueError):
    """A ladder or a prediction that cannot be made; str(e) names the problem and the fix."""


# Flags that change where a run writes or which checkpoints keep the optimizer state, not what it
# computes: a ladder planned before or after a change of these trained the same runs.
NOT_THE_RUN = ("workdir", "config.checkpoint.state_steps")


def _commands(text: str) -> dict:
    """{run name: its train command without the NOT_THE_RUN flags} from a plan listing
    (scaling.plan.dry_run_text)."""
    out, name = {}, None
    drop = re.compile(r"\s*--(?:%s)=\S+" % "|".join(re.escape(f) for f in NOT_THE_RUN))
    for line in text.splitlines():
        m = re.match(r"\[\s*\d+\]\s+(\S+)", line)
        if m:
            name = m.group(1)
        elif line.strip().startswith("python -m") and name:
            out[name] = drop.sub("", line.strip())
    return out


@dataclasses.dataclass
class Ladder:
    """A finished scaling study (open_ladder)."""

    workdir: str
    study: object  # the ladder's preset (ml_collections.ConfigDict)
    runs: list  # scaling.plan.Run of its plan
    findings: dict  # DIR/findings.json
    estimator: str  # the laws' estimator: study.estimator, else the first of the preset's estimators
    count: str  # the laws' parameter count (study.fit.count)
    table: str  # the estimator's fit table
    source: str = ""  # completed (top_up): the ladder's own directory, DIR; "" when workdir is DIR
    added: tuple = ()  # completed: the names of the replicate runs the prediction trained in workdir

    @property
    def archs(self) -> list[str]:
        return list(dict.fromkeys(r.arch for r in self.runs))

    @property
    def largest(self):
        """The ladder's largest run by compute (Table-1 FLOPs)."""
        return max(self.runs, key=lambda r: r.flops)

    def counts(self) -> dict:
        from linscale_jax.study.scaling.results import param_counts

        return param_counts(self.runs)

    def curves(self, arch: str):
        """fit.bootstrap.Curve per size of `arch` in the laws' table and count (ascending N); a
        PredictError when it has fewer than MIN_SIZES sizes."""
        from linscale_jax.fit import bootstrap as bs
        from linscale_jax.fit.table import load
        from linscale_jax.study.scaling.laws import recounted

        path = self.table
        table = load(path)
        if arch not in table.archs:
            raise PredictError(f"{arch} has no rows in {path}; predict one of {', '.join(table.archs)}")
        mine = recounted(table.select(arch), self.counts(), self.count)
        curves = bs.curves_of(mine)
        if len(curves) < MIN_SIZES:
            raise PredictError(f"{arch} has {len(curves)} size(s) in {path}; a law that predicts beyond the "
                               f"ladder needs {MIN_SIZES} or more: run the ladder with more study.sizes")
        return curves

    def seed_sd(self):
        """The laws' estimator's pooled seed sd (fit.bootstrap.SeedSd) from findings.json."""
        from linscale_jax.fit.bootstrap import SeedSd

        return SeedSd.of(self.findings["by_estimator"][self.estimator]["seed_sd_pooled"])

    def margin(self) -> float:
        """The ladder's verdict margin (nats): equivalence inside it."""
        return float(self.findings.get("margin", 0.05))

    def family(self, arch: str) -> list[dict]:
        """The sizes of the ladder's shape for `arch` (module docstring), ascending N: size, n_params
        (non-embedding), n_law (the laws' count), flops_per_token (Table-1), layers, d_model."""
        from linscale_jax.config import check_model
        from linscale_jax.models import accounting, sizes
        from linscale_jax.study.scaling import plan as plan_lib

        paper = copy.deepcopy(self.study)  # the rule does not change a model's accounting
        paper.overrides.optim.rule = "paper"
        big = max((r for r in self.runs if r.arch == arch), key=lambda r: r.n_params)
        shape = (int(big.config.model.n_layers), int(big.config.model.d_model) // int(big.config.model.n_heads))
        out, seen = [], set()
        for size in sizes.LADDER:
            cfg = plan_lib.run_config(paper, arch, size)
            mc = check_model(cfg, where=cfg.name)
            key = (int(mc.n_layers), int(mc.d_model))
            if (key[0], key[1] // int(mc.n_heads)) != shape or key in seen:
                continue
            seen.add(key)
            counts = accounting.param_counts(mc)
            out.append(dict(size=size, n_params=float(counts["non_embedding"]), n_law=float(counts[self.count]),
                            flops_per_token=float(accounting.paper_flops_per_token(mc, int(cfg.train.seq_len))),
                            layers=key[0], d_model=key[1]))
        return sorted(out, key=lambda r: r["n_params"])


def _load_json(path: str, what: str) -> dict:
    """The JSON object in `path` (study.inputs.read_json: one line naming the file when it is
    missing, truncated, not an object or holds NaN), as a PredictError."""
    from linscale_jax.study.inputs import InputError, read_json

    try:
        return read_json(path, what)
    except InputError as e:
        raise PredictError(str(e)) from None


def open_ladder(study) -> Ladder:
    """The finished scaling study at study.ladder_from, run by study.ladder_preset (module docstring);
    PredictError in one line when DIR is missing, unfinished, or was run by another preset."""
    from linscale_jax.study.presets import preset

    wd = str(study.get("ladder_from", "") or "")
    if not wd:
        raise PredictError("no ladder to predict from; pass --config.ladder_from=DIR, a finished scaling study")
    if not os.path.isdir(wd):
        raise PredictError(f"--config.ladder_from={wd} does not exist; pass a finished scaling study's directory")
    name = str(study.ladder_preset)
    try:
        lad = preset(name)
    except (OSError, ValueError, ImportError) as e:
        raise PredictError(f"study.ladder_preset={name!r} cannot be loaded ({e}); give the preset that ran {wd}") from None
    if str(lad.get("kind", "")) != "scaling":
        raise PredictError(f"study.ladder_preset={name!r} is a {lad.get('kind')!r} preset; give the scaling "
                           f"preset that ran {wd} (e.g. cpu)")
    return open_at(wd, lad, name, str(study.get("estimator", "") or ""))


def open_at(wd: str, lad, name: str, estimator: str = "") -> Ladder:
    """The finished scaling study in `wd` run by the scaling preset `lad` (named `name` in messages), its
    laws read under `estimator` ("": the preset's first); PredictError in one line as open_ladder."""
    from linscale_jax.study.scaling import laws
    from linscale_jax.study.scaling import plan as plan_lib

    rerun = f"finish it with python -m linscale_jax.study --config=<its preset> --workdir={wd}"
    for f in (files.FINDINGS_JSON, files.STUDY_PLAN):
        if not os.path.exists(files.study_path(wd, f)):
            raise PredictError(f"{wd} is not a finished scaling study (no {f}); {rerun}")
    found = _load_json(files.study_path(wd, files.FINDINGS_JSON), rerun)
    runs = plan_lib.build_plan(lad, wd)
    with open(files.study_path(wd, files.STUDY_PLAN)) as f:
        theirs = _commands(f.read())
    ours = _commands(plan_lib.dry_run_text(runs))
    differ = sorted(set(ours) ^ set(theirs)) or [n for n in ours if ours[n] != theirs[n]]
    if differ:
        raise PredictError(f"{wd} was not run by the preset {name!r}: its plan.txt differs at {differ[0]}; pass "
                           "--config.ladder_preset=<the preset, or a preset file, that ran it>")
    ests = [str(e) for e in plan_lib.estimators(lad)]
    est = estimator or ests[0]
    if est not in ests:
        raise PredictError(f"--config.estimator={est} is not an estimator of the ladder {wd} ({', '.join(ests)}); "
                           f"pass one of them, or leave it empty for its laws' ({ests[0]})")
    if est not in (found.get("by_estimator") or {}):
        raise PredictError(f"{wd}/findings.json has no results under {est}, the laws' estimator; {rerun}")
    fit_table = files.study_path(wd, files.STUDY_FIT, files.fit_table_name(est, est == ests[0]))
    if not os.path.exists(fit_table):
        raise PredictError(f"{wd} has no fit table {fit_table}; {rerun}")
    return Ladder(workdir=wd, study=lad, runs=runs, findings=found, estimator=est, count=laws.count_of(lad),
                  table=fit_table)
