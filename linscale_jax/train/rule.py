"""The learning-rate protocol of a run, `optim.rule`: where lr, batch, AdamW β2 and warmup come from.

    cfg = resolve(cfg)          # applies cfg.optim.rule to cfg (in place) and returns it
    flags = pinned_flags(cfg)   # command-line flags that keep a resolved cfg's settings under paper
    s = settings(load(), arch, n_params, seq_len, vocab)   # {lr, batch_size, b2, warmup_steps}

`paper`  one rate for every size and arch, as the paper trains (Adam lr 3e-4 at 70M-7B): the
         config's own optim.lr, train.batch_size, optim.b2 and optim.warmup_steps, unchanged.
`tuned`  per arch and size from the rule file shipped beside this module (FILES["tuned"]): lr = c·N^e,
         batch = c·N^e sequences rounded to a power of two, β2 per arch, warmup = w·N tokens
         (Porian et al. 2024), N the non-embedding parameter count of the model config
         (linscale_jax.models.accounting); the grid's laws (`grid`) checked at the main job's sizes
         (tnl's own lr law) with a horizon entry (below). Written by study.tune: the grid
         (`python -m linscale_jax.study --config=configs/study/tune.py --workdir=DIR`), then its
         checks (`--config.tune.rule_from=`, configs/study/tune.py).
`grid`   the tuning grid's rule alone (grid_rule.json beside this module): llama's laws for every arch.
A path to a JSON rule file works like `tuned` with that file. A file with a `horizon` entry
({"tokens": D0, "exponent": g}, written by a horizon check: study.tune.outputs.horizon_file) scales
the rate with the run's length, lr = c·N^e·(D/D0)^-g, D = train.steps·batch·seq_len tokens (the
best rate falls as runs train longer: Bjorck et al. 2024).

Applied where a run config is built: the train command (linscale_jax.train.cli) and a study's
run configs (study.plan.run_config); train.loop.train takes the config as it is.
A rule holds only inside what it was fitted on: N within its range (an arch's own `range` where the
file gives one: the sizes it was tuned or checked at), the same vocabulary and
sequence length (the batch is counted in sequences). Outside, resolve() refuses in one line that
names the range and the fix (optim.rule=paper, or a rule fitted at that scale), so a rule fitted on
byte-level miniatures (N ~ 1e4-1e6) is never extrapolated to the paper's 70M-7B.
A rule file is checked whole when it is read (load: every arch's entry, whichever the run uses):
an empty, malformed, incomplete, cyclic (same_as), negative or non-finite one is refused in one
line naming the file, the entry and the fix, before anything trains.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from pathlib import Path

from linscale_jax.errors import UserError

_PACKAGE = importlib.resources.files("linscale_jax.train")
# the shipped rule files (package data): tuned, the default, is the grid's rule checked at the main
# job's ladder (tnl's own rate) with the horizon; grid, the rule tuned on the grid d16l2 ... d48 alone
FILES = {"tuned": _PACKAGE.joinpath("tuned_rule.json"), "grid": _PACKAGE.joinpath("grid_rule.json")}
RULES = ("paper", *FILES)


class RuleError(UserError, ValueError):
    """A run outside what its learning-rate rule was fitted on, or an unreadable rule file."""


def rule_path(name: str) -> Path | None:
    """The rule file optim.rule names (None for paper)."""
    if name == "paper":
        return None
    if name in FILES:
        return FILES[name]
    path = Path(name)
    if path.suffix != ".json":
        raise RuleError(f"optim.rule={name!r} is not one of {RULES} nor a .json rule file; "
                        "set optim.rule to one of them or to a path to a rule file")
    return path


def load(path: Path | str = FILES["tuned"]) -> dict:
    """The rule file at `path`, checked whole (check): RuleError naming the file, the entry and
    the fix for a missing, empty, malformed, incomplete, cyclic, negative or non-finite one."""
    path = Path(path)
    if not path.is_file():
        raise RuleError(f"learning-rate rule file {path} not found; write one with python -m linscale_jax.study "
                        "--config=configs/study/tune.py --workdir=DIR (DIR/tune/rule.json) or set "
                        "optim.rule=paper")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RuleError(f"learning-rate rule file {path} cannot be read ({e}){FIX}") from None
    if not text.strip():
        raise RuleError(f"learning-rate rule file {path} is empty{FIX}")
    try:
        rule = json.loads(text)
    except ValueError as e:
        where = f", line {e.lineno} column {e.colno}" if hasattr(e, "lineno") else ""
        raise RuleError(f"learning-rate rule file {path} is not valid JSON ({getattr(e, 'msg', e)}{where}; "
                        f"truncated or edited by hand?){FIX}") from None
    check(rule, path)
    return rule


# the end of every bad-file line: what to do instead (never a setting the rule would override)
FIX = ("; correct the file, write it again with python -m linscale_jax.study "
       "--config=configs/study/tune.py --workdir=DIR (DIR/tune/rule.json), or set optim.rule=paper")


def _number(value, where: str, path, lo: float | None = None, hi: float | None = None,
            positive: bool = False) -> float:
    """value as a finite float inside the bounds, else RuleError naming `where` in `path`."""
    bounds = [b for b in ("> 0" if positive else "", f">= {lo:g}" if lo is not None else "",
                          f"< {hi:g}" if hi is not None else "") if b]
    want = " ".join(["a finite number", " and ".join(bounds)]).strip()
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = None
    if (x is None or isinstance(value, bool) or not math.isfinite(x) or (positive and x <= 0)
            or (lo is not None and x < lo) or (hi is not None and x >= hi)):
        raise RuleError(f"learning-rate rule file {path}: {where} is {value!r}, not {want}{FIX}")
    return x


def _law(entry, where: str, path) -> None:
    if not isinstance(entry, dict) or "coefficient" not in entry or "exponent" not in entry:
        raise RuleError(f"learning-rate rule file {path}: {where} is {entry!r}, not a power law "
                        f"{{\"coefficient\": c, \"exponent\": e}}{FIX}")
    _number(entry["coefficient"], f"{where}.coefficient", path, positive=True)
    _number(entry["exponent"], f"{where}.exponent", path)


def _range(rng, where: str, path) -> None:
    if not isinstance(rng, dict) or "n_min" not in rng or "n_max" not in rng:
        raise RuleError(f"learning-rate rule file {path}: {where} is {rng!r}, not "
                        f"{{\"n_min\": N, \"n_max\": N}}{FIX}")
    lo = _number(rng["n_min"], f"{where}.n_min", path, positive=True)
    hi = _number(rng["n_max"], f"{where}.n_max", path, positive=True)
    if lo > hi:
        raise RuleError(f"learning-rate rule file {path}: {where} has n_min {lo:g} > n_max {hi:g}{FIX}")


def _best_rates(sizes, where: str, path) -> None:
    """A per-size table (a tuned arch's sizes, a check's sizes): each size an object with lr_opt > 0,
    the best rate a horizon check pairs against (study.tune.outputs.horizon_pairs)."""
    if not isinstance(sizes, dict):
        raise RuleError(f"learning-rate rule file {path}: {where} is {sizes!r}, not an object with an entry "
                        f"per size{FIX}")
    for size, v in sizes.items():
        if not isinstance(v, dict) or "lr_opt" not in v:
            raise RuleError(f"learning-rate rule file {path}: {where}.{size} is {v!r}, not an object with "
                            f"the size's best rate lr_opt{FIX}")
        _number(v["lr_opt"], f"{where}.{size}.lr_opt", path, positive=True)


def check(rule, path) -> None:
    """Every field settings() reads, for every arch of the file (RuleError: the file, the entry,
    the fix): range, data, warmup_tokens_per_param, default, and per arch either same_as (a listed
    arch, no cycle) or lr and batch power laws with coefficient > 0 and beta2 in [0, 1); and the best
    rates a horizon check reads: every size under an arch's sizes and check.sizes has lr_opt > 0."""
    if not isinstance(rule, dict):
        raise RuleError(f"learning-rate rule file {path} holds a JSON {type(rule).__name__}, not an "
                        f"object with range, data, archs and warmup_tokens_per_param{FIX}")
    for key in ("range", "data", "archs", "warmup_tokens_per_param"):
        if key not in rule:
            raise RuleError(f"learning-rate rule file {path} has no {key!r} entry{FIX}")
    _range(rule["range"], "range", path)
    data = rule["data"]
    if not isinstance(data, dict) or "vocab" not in data or "seq_len" not in data:
        raise RuleError(f"learning-rate rule file {path}: data is {data!r}, not {{\"vocab\": ..., "
                        f"\"seq_len\": ...}}{FIX}")
    seq = _number(data["seq_len"], "data.seq_len", path, positive=True)
    if seq != int(seq):
        raise RuleError(f"learning-rate rule file {path}: data.seq_len is {data['seq_len']!r}, not a "
                        f"whole number{FIX}")
    _number(rule["warmup_tokens_per_param"], "warmup_tokens_per_param", path, lo=0.0)
    archs = rule["archs"]
    if not isinstance(archs, dict) or not archs:
        raise RuleError(f"learning-rate rule file {path}: archs is {archs!r}, not an object with an "
                        f"entry per arch{FIX}")
    default = rule.get("default", "llama")
    if default not in archs:
        raise RuleError(f"learning-rate rule file {path}: archs has no entry for {default!r}, the "
                        f"default arch every unlisted arch uses{FIX}")
    for arch, entry in archs.items():
        where = f"archs.{arch}"
        if not isinstance(entry, dict):
            raise RuleError(f"learning-rate rule file {path}: {where} is {entry!r}, not an object{FIX}")
        if "range" in entry:
            _range(entry["range"], f"{where}.range", path)
        if "sizes" in entry:
            _best_rates(entry["sizes"], f"{where}.sizes", path)
        if "check" in entry:
            if not isinstance(entry["check"], dict) or "sizes" not in entry["check"]:
                raise RuleError(f"learning-rate rule file {path}: {where}.check is {entry['check']!r}, not an "
                                f"object with the checked sizes{FIX}")
            _best_rates(entry["check"]["sizes"], f"{where}.check.sizes", path)
        seen = [arch]
        while "same_as" in entry:
            other = entry["same_as"]
            if other not in archs:
                raise RuleError(f"learning-rate rule file {path}: {where}.same_as names {other!r}, which "
                                f"archs does not list{FIX}")
            if other in seen:
                raise RuleError(f"learning-rate rule file {path}: archs.{arch} refers to itself through "
                                f"same_as ({' -> '.join(seen + [other])}){FIX}")
            seen.append(other)
            where, entry = f"archs.{other}", archs[other]
            if not isinstance(entry, dict):
                raise RuleError(f"learning-rate rule file {path}: {where} is {entry!r}, not an object{FIX}")
        if where != f"archs.{arch}":
            continue  # the entry it shares is checked as its own arch
        for key in ("lr", "batch", "beta2"):
            if key not in entry:
                raise RuleError(f"learning-rate rule file {path}: {where} has no {key!r} (nor a same_as)"
                                f"{FIX}")
        _law(entry["lr"], f"{where}.lr", path)
        _law(entry["batch"], f"{where}.batch", path)
        _number(entry["beta2"], f"{where}.beta2", path, lo=0.0, hi=1.0)
    if "horizon" in rule:
        h = rule["horizon"]
        if not isinstance(h, dict) or "tokens" not in h or "exponent" not in h:
            raise RuleError(f"learning-rate rule file {path}: horizon is {h!r}, not {{\"tokens\": D0, "
                            f"\"exponent\": g}}{FIX}")
        _number(h["tokens"], "horizon.tokens", path, positive=True)
        _number(h["exponent"], "horizon.exponent", path)


def horizon_factor(rule: dict, tokens: float | None) -> float:
    """(tokens / D0)^-g of the file's horizon entry; 1 without one, or for tokens=None (a run at the
    rule's own budget)."""
    h = rule.get("horizon")
    if h is None or tokens is None:
        return 1.0
    return (float(tokens) / float(h["tokens"])) ** -float(h["exponent"])


def power(law: dict, n: float) -> float:
    """c·n^e (inf where it overflows)."""
    try:
        return float(law["coefficient"]) * float(n) ** float(law["exponent"])
    except OverflowError:
        return math.inf


def batch_from_law(law: dict, n: float) -> int:
    """The batch law's value rounded to a power of two in log space (the grid's batches), >= 1."""
    return max(1, 2 ** int(round(math.log2(max(power(law, n), 1.0)))))


def arch_rule(rule: dict, arch: str) -> dict:
    """The arch's own rule, or the one it shares (`same_as`; archs the rule file does not list use
    its `default` arch's). The file was checked (check): the chain ends."""
    entry = rule["archs"].get(arch) or rule["archs"][rule.get("default", "llama")]
    for _ in range(len(rule["archs"])):
        if "same_as" not in entry:
            break
        entry = rule["archs"][entry["same_as"]]
    return entry


def settings(rule: dict, arch: str, n_params: float, seq_len: int, vocab: str,
             source: str = "optim.rule=tuned", steps: int | None = None) -> dict:
    """{lr, batch_size, b2, warmup_steps} of a run with `n_params` non-embedding parameters and
    `steps` steps (the rate of a file with a horizon entry depends on the run's tokens; None: at the
    file's own budget); RuleError outside the fitted range, vocabulary or sequence length."""
    rng = rule["archs"].get(arch, {}).get("range", rule["range"])  # the sizes this arch was tuned or checked at
    lo, hi = float(rng["n_min"]), float(rng["n_max"])
    data = rule["data"]
    fitted = (f"{source} was fitted on N = {lo:.3g}-{hi:.3g} non-embedding parameters, "
              f"{data['vocab']} vocabulary, sequences of {data['seq_len']}")
    other = "" if source == "optim.rule=grid" else \
        ", another rule (optim.rule=grid: tuned on the grid d16l2 ... d48, every arch on llama's law)"
    fix = f"; set optim.rule=paper (one rate for every size: optim.lr){other} or fit a rule at this scale " \
          "(python -m linscale_jax.study --config=configs/study/tune.py)"
    if not lo <= n_params <= hi:
        raise RuleError(f"{fitted}, and this {arch} has N = {n_params:.3g}, outside that range{fix}")
    if str(vocab) != str(data["vocab"]) or int(seq_len) != int(data["seq_len"]):
        raise RuleError(f"{fitted}, and this run has a {vocab} vocabulary, sequences of {seq_len}{fix}")
    entry = arch_rule(rule, arch)
    for key in ("lr", "batch"):  # finite laws can still overflow (or vanish) at this N
        value = power(entry[key], n_params)
        if not (math.isfinite(value) and value > 0):
            raise RuleError(f"{source} gives this {arch} (N = {n_params:.3g}) a {key} of {value:g}: its "
                            f"{key} law {entry[key]} is no finite positive number there{FIX}")
    batch = batch_from_law(entry["batch"], n_params)
    warmup = math.ceil(float(rule["warmup_tokens_per_param"]) * n_params / (batch * int(seq_len)))
    tokens = None if steps is None else float(steps) * batch * int(seq_len)
    return dict(lr=float(f"{power(entry['lr'], n_params) * horizon_factor(rule, tokens):.4g}"), batch_size=batch,
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
                 source=f"optim.rule={name}", steps=int(cfg.train.steps))
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
