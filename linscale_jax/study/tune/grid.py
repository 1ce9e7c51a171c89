"""The tuning grid's cells (study.tune): their run configs and the stages that choose them.

    cells = all_cells(study, loss)          # every cell the stages ask for, given {cell: loss} so far
    run = make_run(study, cell, workdir, i)  # one study run (study.plan) at the cell's settings
    rule_of(study, loss)                    # lr*(N), batch*(N) and beta2 per arch (study.tune_fit)

Stages per size of tune.archs (Porian et al. 2024's pruning):
  1. lr: tune.lr_points values in factor-2 steps at (tune.batch, tune.beta2), centred on the prior
     rule tune.prior_lr·(N/tune.prior_n)^tune.prior_exponent;
  2. beta2 in tune.beta2s at stage 1's best rate;
  3. every batch of tune.batches at the best beta2, each at the best rate and one step either side;
  4. the beta2 choice rechecked at the best batch when it is not tune.batch.
A line of rates whose best lies at an end grows one step that way (at most tune.max_extend), when
its best is within tune.extend_within nats of the size's best (always on stage 1's line); the batch
axis grows the same way. Then one replicate seed of the best cell of tune.replicate_sizes, and
llama's rule checked on tune.check_archs at tune.check_sizes (the rule's batch and beta2, the rate
at the rule and one step either side, grown at the edges). With tune.rule_from (a rule file, e.g. the
shipped linscale_jax/train/tuned_rule.json) nothing is tuned: the check archs are checked against
that file's default arch's rule (its lr and batch laws, its β2), at the file's own protocol.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from linscale_jax.contract import split_list
from linscale_jax.study.scaling import plan as plan_lib
from linscale_jax.study.tune import fit as tune_fit
from linscale_jax.study.tune.fit import Cell, lr_of


def cell_name(c: Cell, lr_base: float) -> str:
    return (f"{c.arch}-{c.size}-lr{lr_of(c.k, lr_base):g}-bs{c.batch}-beta2_{c.beta2:g}"
            + (f"-seed{c.seed}" if c.seed else ""))


def names(value) -> list[str]:
    """A comma list of the preset, [] when empty (tune.check_archs = "": no checks)."""
    return split_list(str(value or ""))


def floats(value, field: str) -> list[float]:
    return [float(x) for x in split_list(str(value), field)]


def cell_config(study, c: Cell):
    """The run config of a cell: the preset's overrides with the cell's lr, batch, β2 and warmup
    (optim.rule=paper: the cell's own settings), its token budget in steps."""
    t = study.tune
    s = copy.deepcopy(study)
    n = n_params_of(study, c.arch, c.size)
    seq = int(s.overrides.train.seq_len)
    s.overrides.train.batch_size = int(c.batch)
    s.overrides.optim.update(lr=lr_of(c.k, float(t.lr_base)), b2=float(c.beta2), rule="paper",
                             warmup_steps=math.ceil(float(t.warmup_tokens_per_param) * n / (c.batch * seq)))
    cfg = plan_lib.run_config(s, c.arch, c.size, c.seed)
    cfg.name = cell_name(c, float(t.lr_base))
    return cfg


def make_run(study, c: Cell, workdir: str, index: int):
    return plan_lib.make_run(study, cell_config(study, c), c.arch, c.size, c.seed, workdir, index)


# ---- the staged grid -----------------------------------------------------------------------------

class _Plan:
    """The cells one (arch, size) asks for given the losses so far; `pending` once a stage waits."""

    def __init__(self, t, arch: str, size: str, loss: dict):
        self.t, self.arch, self.size, self.loss = t, arch, size, loss
        self.want: list[Cell] = []

    def need(self, cells) -> bool:
        """Add cells; True when some are not measured yet."""
        self.want.extend(c for c in cells if c not in self.want)
        return any(c not in self.loss for c in cells)

    def best_so_far(self) -> float:
        done = [self.loss[c] for c in self.want if c in self.loss]
        return min(done) if done else math.inf

    def line(self, batch: int, beta2: float, ks, always: bool = False) -> Cell | None:
        """The best cell of a line of rates, grown at its edges (module); None while unmeasured."""
        ks = sorted(set(ks))
        for _ in range(int(self.t.max_extend) + 1):
            cells = [Cell(self.arch, self.size, k, batch, beta2) for k in ks]
            if self.need(cells):
                return None
            best = min(cells, key=lambda c: self.loss[c])
            edge = best.k in (ks[0], ks[-1])
            close = self.loss[best] <= self.best_so_far() + float(self.t.extend_within)
            if not (edge and np.isfinite(self.loss[best]) and (always or close)):
                return best
            ks.append(ks[0] - 1 if best.k == ks[0] else ks[-1] + 1)
            ks.sort()
        return best


def tuned_cells(t, arch: str, size: str, n: float, loss: dict) -> list[Cell]:
    """Every cell of stages 1-4 (module) of one size that the losses so far call for."""
    p = _Plan(t, arch, size, loss)
    batch0, beta0 = int(t.batch), float(t.beta2)
    prior = float(t.prior_lr) * (n / float(t.prior_n)) ** float(t.prior_exponent)
    k0, half = tune_fit.grid_k(prior, float(t.lr_base)), int(t.lr_points) // 2
    b1 = p.line(batch0, beta0, range(k0 - half, k0 - half + int(t.lr_points)), always=True)
    if b1 is None:
        return p.want
    beta2s = floats(t.beta2s, "study.tune.beta2s")
    if p.need([Cell(arch, size, b1.k, batch0, b) for b in beta2s]):
        return p.want
    beta = min((Cell(arch, size, b1.k, batch0, b) for b in beta2s), key=lambda c: loss[c]).beta2
    bests, waiting = {}, False
    for b in (int(x) for x in floats(t.batches, "study.tune.batches")):
        r = p.line(b, beta, [b1.k - 1, b1.k, b1.k + 1])
        waiting |= r is None
        bests[b] = r
    if waiting:
        return p.want
    for _ in range(int(t.max_extend)):
        top = min(bests.values(), key=lambda c: loss[c])
        bs = sorted(bests)
        if top.batch not in (bs[0], bs[-1]) or not np.isfinite(loss[top]):
            break
        nb = top.batch // 2 if top.batch == bs[0] else top.batch * 2
        if nb < 1 or nb > int(t.max_batch) or nb in bests:
            break
        r = p.line(nb, beta, [top.k - 1, top.k, top.k + 1])
        if r is None:
            return p.want
        bests[nb] = r
    top = min(bests.values(), key=lambda c: loss[c])
    if top.batch != batch0:
        p.need([Cell(arch, size, top.k, top.batch, b) for b in beta2s])
    return p.want


def check_cells(t, arch: str, size: str, rule_lr: float, batch: int, beta2: float,
                loss: dict) -> list[Cell]:
    """An arch's check of a rule at one size: the rule's batch and β2, the rule's rate and one step
    either side, grown at the edges."""
    p = _Plan(t, arch, size, loss)
    k = tune_fit.grid_k(rule_lr, float(t.lr_base))
    p.line(batch, beta2, [k - 1, k, k + 1], always=True)
    return p.want


def sizes_of(study) -> list[str]:
    return split_list(study.sizes, "study.sizes")


_N_PARAMS: dict = {}


def n_params_of(study, arch: str, size: str) -> float:
    """Non-embedding N of the model file's <arch>-<size> (linscale_jax.models.accounting)."""
    from linscale_jax.models import ModelConfig, accounting

    key = (str(study.model_file), arch, size)
    if key not in _N_PARAMS:
        cfg = plan_lib.model_config(study, f"{arch}-{size}")
        _N_PARAMS[key] = float(accounting.param_counts(ModelConfig.from_config(cfg.model))["non_embedding"])
    return _N_PARAMS[key]


def replicate_sizes(study) -> list[str]:
    sizes = sizes_of(study)
    out = []
    for x in split_list(str(study.tune.replicate_sizes)):
        s = sizes[0] if x == "smallest" else sizes[-1] if x == "largest" else x
        if s not in out:
            out.append(s)
    return out


def rule_from(study) -> dict | None:
    """The rule file tune.rule_from names (linscale_jax.train.rule.load: checked whole), or None
    when the grid tunes study.archs itself."""
    from linscale_jax.train import rule

    path = str(study.tune.get("rule_from", "") or "")
    return rule.load(path) if path else None


def tuned_archs(study) -> list[str]:
    """The archs this grid tunes: study.archs, or none when the rule comes from tune.rule_from."""
    return [] if rule_from(study) is not None else split_list(study.archs, "study.archs")


def reference(study, loss: dict) -> tuple[str, dict, dict, float]:
    """(arch, lr law, batch law, β2) of the rule the check archs are checked against: tune.rule_from's
    default arch, or the first tuned arch's rule fitted on the losses (bootstrap off)."""
    from linscale_jax.train import rule

    given = rule_from(study)
    if given is not None:
        arch = given.get("default", "llama")
        entry = rule.arch_rule(given, arch)
        return arch, entry["lr"], entry["batch"], float(entry["beta2"])
    arch = tuned_archs(study)[0]
    fitted = rule_of(study, loss, bootstrap=0)[arch]
    return arch, fitted["lr"], fitted["batch"], beta2_of(fitted)


def rule_of(study, loss: dict, bootstrap: int | None = None) -> dict:
    """Every tuned arch's rule from the losses (study.tune_fit.fit_rules)."""
    t = study.tune
    sigma, _ = tune_fit.seed_sd(loss)
    out = {}
    for arch in tuned_archs(study):
        cells = {s: [c for c in loss if (c.arch, c.size) == (arch, s)] for s in sizes_of(study)}
        out[arch] = tune_fit.fit_rules(cells, loss, {s: n_params_of(study, arch, s) for s in cells},
                                       float(t.lr_base), sigma,
                                       bootstrap=int(t.bootstrap) if bootstrap is None else bootstrap,
                                       seed=int(t.seed))
    return out


def beta2_of(fitted: dict) -> float:
    """The rule's β2: the β2 of most sizes' best cells (ties: the larger)."""
    votes: dict[float, int] = {}
    for o in fitted["optima"].values():
        votes[o.best.beta2] = votes.get(o.best.beta2, 0) + 1
    return max(votes, key=lambda b: (votes[b], b))


def all_cells(study, loss: dict) -> list[Cell]:
    """Every cell the staged grid calls for given the losses so far (stages wait on each other)."""
    t = study.tune
    tuned = tuned_archs(study)
    want = []
    for arch in tuned:
        for s in sizes_of(study):
            want += tuned_cells(t, arch, s, n_params_of(study, arch, s), loss)
    if any(c not in loss for c in want):
        return want
    for arch in tuned:
        fitted = rule_of(study, loss, bootstrap=0)[arch]
        for s in replicate_sizes(study):
            want.append(fitted["optima"][s].best._replace(seed=1))
    if any(c not in loss for c in want):
        return want
    _, lr_law, batch_law, beta2 = reference(study, loss)
    for arch in names(study.tune.check_archs):
        for s in split_list(str(study.tune.check_sizes)):
            n = n_params_of(study, arch, s)
            want += check_cells(t, arch, s, tune_fit.law_value(lr_law, n), rule_batch(batch_law, n), beta2, loss)
    return want


def rule_batch(law: dict, n: float) -> int:
    from linscale_jax.train import rule

    return rule.batch_from_law(law, n)


def data_of(study) -> dict:
    """The protocol a rule holds for (the rule file's `data`): corpus, vocabulary, context, token
    budget per cell, schedule, estimator, validation batches."""
    t = study.tune
    cfg = cell_config(study, Cell(split_list(study.archs, "study.archs")[0], sizes_of(study)[0], 0,
                                  int(t.batch), float(t.beta2)))
    return {"task": str(cfg.data.task), "vocab": str(cfg.data.vocab), "seq_len": int(cfg.train.seq_len),
            "tokens": float(study.tokens), "schedule": str(cfg.optim.schedule),
            "estimator": f"cooldown ({float(study.cooldown.fraction):g} of the steps, {study.cooldown.shape})",
            "val_batches": int(study.eval.val_batches)}
