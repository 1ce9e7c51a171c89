"""The learning-rate protocol of a run, `optim.rule`: where lr, batch, AdamW β2 and warmup come from.

    cfg = resolve(cfg)          # applies cfg.optim.rule to cfg (in place) and returns it
    flags = pinned_flags(cfg)   # command-line flags that keep a resolved cfg's settings under paper
    s = settings(load(), arch, n_params, seq_len, vocab)   # {lr, batch_size, b2, warmup_steps}

`paper`  one rate for every size and arch, as the paper trains (Adam lr 3e-4 at 70M-7B): the
         config's own optim.lr, train.batch_size, optim.b2 and optim.warmup_steps, unchanged.
`tuned`  per arch and size from the rule file shipped beside this module (TUNED_FILE, written by
         `python -m linscale_jax.study --config=configs/study/tune.py --workdir=DIR`, study.tune): lr = c·N^e,
         batch = c·N^e sequences rounded to a power of two, β2 per arch, warmup = w·N tokens
         (Porian et al. 2024), N the non-embedding parameter count of the model config
         (linscale_jax.models.accounting).
A path to a JSON rule file works like `tuned` with that file.

Applied where a run config is built: the train command (linscale_jax.train.cli) and a study's
run configs (study.plan.run_config); train.loop.train takes the config as it is.
A rule holds only inside what it was fitted on: N within its range (an arch's own `range` where the
file gives one: the sizes it was tuned or checked at), the same vocabulary and
sequence length (the batch is counted in sequences). Outside, resolve() refuses in one line that
names the range and the fix (optim.rule=paper, or a rule fitted at that scale), so a rule fitted on
byte-level miniatures (N ~ 1e4-1e6) is never extrapolated to the paper's 70M-7B.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from pathlib import Path

from linscale_jax.errors import UserError

TUNED_FILE = importlib.resources.files("linscale_jax.train").joinpath("tuned_rule.json")  # package data
RULES = ("paper", "tuned")


class RuleError(UserError, ValueError):
    """A run outside what its learning-rate rule was fitted on, or an unreadable rule file."""


def rule_path(name: str) -> Path | None:
    """The rule file optim.rule names (None for paper)."""
    if name == "paper":
        return None
    if name == "tuned":
        return TUNED_FILE
    path = Path(name)
    if path.suffix != ".json":
        raise RuleError(f"optim.rule={name!r} is not one of {RULES} nor a .json rule file; "
                        "set optim.rule=tuned, optim.rule=paper or a path to a rule file")
    return path


def load(path: Path | str = TUNED_FILE) -> dict:
    path = Path(path)
    if not path.is_file():
        raise RuleError(f"learning-rate rule file {path} not found; write one with python -m linscale_jax.study "
                        "--config=configs/study/tune.py --workdir=DIR (DIR/tune/rule.json) or set "
                        "optim.rule=paper")
    with open(path) as f:
        rule = json.load(f)
    for key in ("range", "data", "archs", "warmup_tokens_per_param"):
        if key not in rule:
            raise RuleError(f"{path} has no {key!r} field; rewrite it with configs/study/tune.py")
    return rule


def power(law: dict, n: float) -> float:
    return float(law["coefficient"]) * float(n) ** float(law["exponent"])


def batch_from_law(law: dict, n: float) -> int:
    """The batch law's value rounded to a power of two in log space (the grid's batches), >= 1."""
    return max(1, 2 ** int(round(math.log2(max(power(law, n), 1.0)))))


def arch_rule(rule: dict, arch: str) -> dict:
    """The arch's own rule, or the one it shares (`same_as`; archs the rule file does not list use
    its `default` arch's)."""
    entry = rule["archs"].get(arch) or rule["archs"][rule.get("default", "llama")]
    while "same_as" in entry:
        entry = rule["archs"][entry["same_as"]]
    return entry


def settings(rule: dict, arch: str, n_params: float, seq_len: int, vocab: str,
             source: str = "optim.rule=tuned") -> dict:
    """{lr, batch_size, b2, warmup_steps} of a run with `n_params` non-embedding parameters;
    RuleError outside the fitted range, vocabulary or sequence length."""
    rng = rule["archs"].get(arch, {}).get("range", rule["range"])  # the sizes this arch was tuned or checked at
    lo, hi = float(rng["n_min"]), float(rng["n_max"])
    data = rule["data"]
    fitted = (f"{source} was fitted on N = {lo:.3g}-{hi:.3g} non-embedding parameters, "
              f"{data['vocab']} vocabulary, sequences of {data['seq_len']}")
    fix = "; set optim.rule=paper (one rate for every size: optim.lr) or fit a rule at this scale " \
          "(python -m linscale_jax.study --config=configs/study/tune.py)"
    if not lo <= n_params <= hi:
        raise RuleError(f"{fitted}, and this {arch} has N = {n_params:.3g}, outside that range{fix}")
    if str(vocab) != str(data["vocab"]) or int(seq_len) != int(data["seq_len"]):
        raise RuleError(f"{fitted}, and this run has a {vocab} vocabulary, sequences of {seq_len}{fix}")
    entry = arch_rule(rule, arch)
    batch = batch_from_law(entry["batch"], n_params)
    warmup = math.ceil(float(rule["warmup_tokens_per_param"]) * n_params / (batch * int(seq_len)))
    return dict(lr=float(f"{power(entry['lr'], n_params):.4g}"), batch_size=batch,
                b2=float(entry["beta2"]), warmup_steps=int(warmup))


def resolve(cfg):
    """Apply cfg.optim.rule to cfg (lr, batch, β2, warmup; see module) and return cfg. `paper`
    changes nothing; applying a rule twice gives the same config."""
    name = str(cfg.optim.get("rule", "paper"))
    path = rule_path(name)
    if path is None:
        return cfg
    from linscale_jax.models import ModelConfig, accounting

    mc = ModelConfig.from_config(cfg.model)
    n = float(accounting.param_counts(mc)["non_embedding"])
    s = settings(load(path), mc.arch, n, int(cfg.train.seq_len), str(cfg.data.vocab),
                 source=f"optim.rule={name}")
    cfg.train.batch_size = s["batch_size"]
    cfg.optim.update(lr=s["lr"], b2=s["b2"], warmup_steps=s["warmup_steps"])
    return cfg


def pinned_flags(cfg) -> list[str]:
    """Flags that keep a resolved config's batch, β2 and warmup with optim.rule=paper (so a changed
    optim.lr, e.g. a divergence's lower rate, is not replaced by the rule's); [] under paper."""
    if str(cfg.optim.get("rule", "paper")) == "paper":
        return []
    return ["--config.optim.rule=paper", f"--config.train.batch_size={cfg.train.batch_size}",
            f"--config.optim.b2={cfg.optim.b2}", f"--config.optim.warmup_steps={cfg.optim.warmup_steps}"]
