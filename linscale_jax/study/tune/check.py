"""The tuning grid's whole config, checked before anything trains (study.tune.experiment.plan):
every field the later stages read (β2s, batches, replicate and check sizes, the rule's fit) as well
as the first's, so a typo is one line naming the field, not a failure after hours of training.

    check_tune(study)     # TuneConfigError: --config.<field>=<value>, what is wrong, the fix
"""

from __future__ import annotations

import math

from linscale_jax.errors import UserError


class TuneConfigError(UserError, ValueError):
    """A field of the tuning preset that the grid cannot use (message: the field and the fix)."""


def _bad(field: str, value, problem: str) -> TuneConfigError:
    return TuneConfigError(f"--config.{field}={value!r}: {problem}; fix that field (configs/study/tune.py "
                           "has the defaults)")


def _get(study, field: str):
    node = study
    for part in field.split("."):
        node = node[part]
    return node


def _num(study, field: str, kind=float, lo: float | None = None, hi: float | None = None,
         above: float | None = None):
    """study.<field> as a finite `kind` within [lo, hi] (and > above)."""
    value = _get(study, field)
    try:
        x = kind(value)
        ok = math.isfinite(x) and (kind is not int or float(value) == x)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok or (lo is not None and x < lo) or (hi is not None and x > hi) or (above is not None and x <= above):
        bounds = [f"{op} {b:g}" for op, b in ((">=", lo), ("<=", hi), (">", above)) if b is not None]
        want = "an integer" if kind is int else "a finite number"
        raise _bad(field, value, f"need {want}{' ' + ' and '.join(bounds) if bounds else ''}")
    return x


def _list(study, field: str) -> list[str]:
    from linscale_jax.study.scaling import plan as plan_lib

    value = _get(study, field)
    try:
        return plan_lib.split_list(str(value))
    except ValueError:
        raise _bad(field, value, "need a comma-separated list") from None


def check_tune(study) -> None:
    """Every field the tuning grid reads (module docstring); TuneConfigError on the first bad one."""
    from linscale_jax.models import registry
    from linscale_jax.models import sizes as sizes_lib
    from linscale_jax.study.scaling import plan as plan_lib
    from linscale_jax.study.tune import grid as tune_grid

    t = study.tune
    for f in ("lr_base", "prior_lr", "prior_n"):
        _num(study, f"tune.{f}", above=0.0)
    _num(study, "tune.prior_exponent")
    _num(study, "tune.lr_points", int, lo=1)
    _num(study, "tune.max_extend", int, lo=0)
    _num(study, "tune.extend_within", lo=0.0)
    batch = _num(study, "tune.batch", int, lo=1)
    max_batch = _num(study, "tune.max_batch", int, lo=1)
    batches = []
    for x in _list(study, "tune.batches"):
        try:
            batches.append(int(x))
            assert batches[-1] >= 1 and str(batches[-1]) == x
        except (ValueError, AssertionError):
            raise _bad("tune.batches", t.batches, f"{x!r} is not a batch of >= 1 sequences") from None
    if max(batches + [batch]) > max_batch:
        raise _bad("tune.max_batch", t.max_batch, f"below the largest batch of tune.batch/tune.batches "
                   f"({max(batches + [batch])})")
    _num(study, "tune.beta2", lo=0.0, hi=0.9999999)
    for x in _list(study, "tune.beta2s"):
        try:
            b = float(x)
            assert 0.0 <= b < 1.0
        except (ValueError, AssertionError):
            raise _bad("tune.beta2s", t.beta2s, f"{x!r} is not an AdamW beta2 in [0, 1)") from None
    _num(study, "tune.warmup_tokens_per_param", lo=0.0)
    _num(study, "tune.own_rule_factor", above=1.0)
    _num(study, "tune.bootstrap", int, lo=0)
    _num(study, "tune.seed", int)
    sizes = _list(study, "sizes")
    archs = _list(study, "archs")
    for x in plan_lib.split_list(str(t.replicate_sizes)) if str(t.replicate_sizes or "").strip() else []:
        if x not in ("smallest", "largest", *sizes):
            raise _bad("tune.replicate_sizes", t.replicate_sizes,
                       f"{x!r} is not smallest, largest or one of the tuned sizes ({', '.join(sizes)})")
    checks = tune_grid.names(t.check_archs)
    for a in archs + checks:
        try:
            known = sizes_lib.split_variant(a)[0] in registry.ARCHS
        except ValueError:
            known = False
        if not known:
            field = "archs" if a in archs else "tune.check_archs"
            raise _bad(field, _get(study, field), f"{a!r} is not an architecture ({', '.join(registry.ARCHS)})")
    check_sizes = _list(study, "tune.check_sizes") if checks else []
    for field, names, at in (("sizes", archs, sizes), ("tune.check_sizes", checks, check_sizes)):
        for a in names:
            for s in at:
                try:
                    tune_grid.n_params_of(study, a, s)
                except Exception as e:  # noqa: BLE001 - the model file's own error, in the line
                    raise _bad(field, _get(study, field), f"{a}-{s} is not a model of {study.model_file} "
                               f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    estimators = _list(study, "estimators")
    if "cooldown" not in estimators:
        raise _bad("estimators", study.estimators, "the grid judges every cell by its cooldown loss: "
                   "include cooldown")
    if str(study.overrides.optim.get("schedule", "")) != "constant":
        raise _bad("overrides.optim.schedule", study.overrides.optim.get("schedule"),
                   "cooldowns branch off a constant learning rate: set constant")
    _num(study, "workers", int, lo=1)
    _check_rule_from(study, checks)


def _check_rule_from(study, checks: list[str]) -> None:
    """tune.rule_from: a readable rule file (linscale_jax.train.rule.load's line otherwise), some
    check archs to check against it, and this preset's protocol equal to the file's (a rule holds
    for the data, context and estimator it was fitted on). The token budget may differ: a check at
    another budget is a horizon check (tune.outputs.horizon_file: the laws stay, the check and the length
    exponent it measures are recorded beside them)."""
    from linscale_jax.study.tune import grid as tune_grid

    path = str(study.tune.get("rule_from", "") or "")
    if not path:
        return
    given = tune_grid.rule_from(study)
    if not checks:
        raise _bad("tune.check_archs", study.tune.check_archs, "with tune.rule_from nothing is tuned: name "
                   "the archs to check against that file's rule")
    ours = tune_grid.data_of(study)
    for key, value in given["data"].items():
        if key in ours and key != "tokens" and str(ours[key]) != str(value):
            raise _bad("tune.rule_from", path, f"its rule was fitted with data.{key}={value!r} and this preset "
                       f"has {ours[key]!r}; check at the file's protocol (configs/study/tune.py) or refit")
