"""The run config of a size beyond the ladder under the ladder's own protocol, and where its loss point lies.

    cfg, rule_note = rung_config(lad, arch, size, tokens, mode, seed)   # mode: study.rule; seed >= 1: a replicate
    tokens = point_tokens(lad, cfg)      # the tokens of the loss point the laws' estimator gives

A rung trains as the ladder's runs do (scaling.plan.run_config on the ladder's preset with its
token budget set to `tokens`): the same model file, overrides, schedule, checkpoints and
learning-rate rule. A learning-rate rule holds only on the sizes it was fitted on (train.rule), and
a size beyond the ladder often lies outside them. study.rule decides:
  extrapolate   the rule's power laws (lr, batch, warmup per N, its β2) evaluated at that N, pinned
                in the run config (optim.rule=paper with those values); rule_note records the range
                left and the values, and the report states them. An arch with its own lr law (tnl's,
                fitted on the few sizes of a check) continues beyond its sizes from its rate at the
                nearer edge along the exponent of the rule's default law, fitted on the grid with an
                interval (continue_lr)
  as_given      the rule as the ladder used it: a size outside its range is refused in one line
                that names --config.rule=extrapolate
"""

from __future__ import annotations

import copy
import math

from linscale_jax.study.predict.ladder import PredictError

MODES = ("extrapolate", "as_given")


def _ladder_with(lad, tokens: float):
    s = copy.deepcopy(lad.study)
    s.tokens = float(tokens)
    s.tokens_by_size = ""  # every prediction run trains `tokens`, not the ladder's budget of its size
    return s


def _rule_range(rule_file: dict, arch: str) -> tuple[float, float]:
    rng = rule_file["archs"].get(arch, {}).get("range", rule_file["range"])
    return float(rng["n_min"]), float(rng["n_max"])


def continue_lr(rule_file: dict, arch: str, n: float, lo: float, hi: float) -> dict | None:
    """Continue `arch`'s own lr law past N = lo..hi (in place in `rule_file`, the rule's copy) from its
    rate at the edge nearer `n` along the exponent of the rule's default law: an own law rests on the
    few sizes of a check (its exponent has no interval), the default law's on the grid. Returns
    {"n_edge", "exponent"}, or None for `n` inside the range or an arch on the default law."""
    from linscale_jax.train import rule

    own = rule.arch_rule(rule_file, arch)
    base = rule.arch_rule(rule_file, rule_file.get("default", "llama"))
    if own is base or lo <= n <= hi:
        return None
    edge, e0 = (lo if n < lo else hi), float(base["lr"]["exponent"])
    own["lr"] = dict(own["lr"], coefficient=rule.power(own["lr"], edge) / edge ** e0, exponent=e0,
                     coefficient_ci=None, exponent_ci=None)
    return dict(n_edge=edge, exponent=e0)


def rung_config(lad, arch: str, size: str, tokens: float, mode: str, seed: int = 0):
    """(run config, rule_note or None) of `arch` at `size` training `tokens` (module docstring); seed >= 1
    is a replicate of the rung (scaling.plan.run_config: <arch>-<size>-seed<k>, train.seed and data.seed + k)."""
    from linscale_jax.models import ModelConfig, accounting
    from linscale_jax.study.scaling import plan as plan_lib
    from linscale_jax.train import rule

    if mode not in MODES:
        raise PredictError(f"study.rule={mode!r}; use one of {', '.join(MODES)}")
    study = _ladder_with(lad, tokens)
    name = str(study.overrides.optim.get("rule", "paper"))
    path = rule.rule_path(name)
    if path is None:
        return plan_lib.run_config(study, arch, size, seed), None
    paper = copy.deepcopy(study)
    paper.overrides.optim.rule = "paper"
    pcfg = plan_lib.run_config(paper, arch, size)
    mc = ModelConfig.from_config(pcfg.model)
    n = float(accounting.param_counts(mc)["non_embedding"])
    rule_file = rule.load(path)
    lo, hi = _rule_range(rule_file, mc.arch)
    if lo <= n <= hi:
        return plan_lib.run_config(study, arch, size, seed), None
    if mode == "as_given":
        raise PredictError(f"{arch}-{size} (N = {n:.3g}) lies outside N = {lo:.3g}-{hi:.3g}, the sizes the "
                           f"ladder's learning-rate rule (optim.rule={name}) was fitted on; pass --config.rule="
                           "extrapolate to carry the rule's laws to this size (the report says so), or fit a "
                           "rule at this scale (configs/study/tune.py) and run the ladder with it")
    wide = copy.deepcopy(rule_file)
    span = dict(n_min=min(lo, n), n_max=max(hi, n))
    wide["range"] = dict(wide["range"], **span)
    for entry in wide["archs"].values():
        if "range" in entry:
            entry["range"] = dict(entry["range"], **span)
    edge = continue_lr(wide, mc.arch, n, lo, hi)
    seq = int(pcfg.train.seq_len)
    s = rule.settings(wide, mc.arch, n, seq, str(pcfg.data.vocab), source=f"optim.rule={name}")
    steps = max(1, math.ceil(float(tokens) / (s["batch_size"] * seq)))  # the rung's length, for a rule with a horizon
    s = rule.settings(wide, mc.arch, n, seq, str(pcfg.data.vocab), source=f"optim.rule={name}", steps=steps)
    study.overrides.optim.update(rule="paper", lr=s["lr"], b2=s["b2"], warmup_steps=s["warmup_steps"])
    study.overrides.train.batch_size = s["batch_size"]
    note = dict(rule=name, n_params=n, range=[lo, hi], lr=s["lr"], batch_size=s["batch_size"], b2=s["b2"],
                warmup_steps=s["warmup_steps"])
    if edge is not None:
        note["lr_continued"] = edge
    return plan_lib.run_config(study, arch, size, seed), note


def point_tokens(lad, cfg) -> float:
    """The tokens at the loss point of the laws' estimator for a run of `cfg`: its last step's, or
    for cooldown the end of the branch off its last checkpoint (scaling.cooldown)."""
    from linscale_jax.study.scaling import cooldown

    steps = int(cfg.train.steps)
    if lad.estimator == "cooldown":
        steps += cooldown.cooldown_steps(steps, float(lad.study.cooldown.fraction))
    return float(steps * int(cfg.train.batch_size) * int(cfg.train.seq_len))
