"""How much of the compute grid a ladder's envelope brackets, predicted from a fitted law before
training the ladder: the tool for choosing tokens per size.

    rungs = rungs_of(table)                       # one arch's sizes from a study's fit table
    law = dict(E=..., A=..., alpha=..., B=..., beta=...)   # L(N, D) = E + A/N^α + B/D^β (approach 3)
    s = predict(law, rungs, {n: tokens}, noise=Noise(run_sd=0.017, checkpoint_sd=0.015))
    s["interior"], s["interior_range"]            # mean share over the draws, [10 %, 90 %] of the draws

Every run of size N on D tokens is drawn as the study records it: `checkpoints` points at D·k/checkpoints
(k = 1..checkpoints) from `min_tokens` on (the laws' first step), loss from the law plus a per-run
offset (run_sd: the seed sd of a run) and independent noise per checkpoint (checkpoint_sd: the
residual around each run's trend, findings.json "checkpoint_sd"). The envelope and its bracketing
are fit.approach1.envelope's, so a prediction and a measured DIR/fit/bracketing.csv count alike:
the share of the log-compute grid where the lowest loss comes from an interior size, the smallest
or the largest size reaching that compute, or where one size alone reaches it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from linscale_jax.fit import approach1
from linscale_jax.fit.table import FitError, Table, from_columns

SHARES = {"interior": 0, "smallest": -1, "largest": 1, "one_size": 2}  # approach1.Envelope.clamped


@dataclasses.dataclass(frozen=True)
class Rung:
    """One size of a ladder: its non-embedding parameters and training FLOPs per token (the
    table's compute unit per token, so the grid is the study's)."""

    n_params: float
    flops_per_token: float


@dataclasses.dataclass(frozen=True)
class Noise:
    """Seed-to-seed sd of a run's level and independent sd of each checkpoint, in nats."""

    run_sd: float = 0.0
    checkpoint_sd: float = 0.0


def rungs_of(table: Table) -> list[Rung]:
    """One arch's sizes (ascending N) with the FLOPs per token of its table's runs."""
    out = []
    for n in np.unique(table.n_params):
        at = table.take(table.n_params == n)
        out.append(Rung(float(n), float(np.median(at.flops / at.tokens))))
    return out


def law_loss(law: dict, n_params, tokens) -> np.ndarray:
    """L(N, D) = E + A/N^α + B/D^β of an approach-3 law dict (findings.json laws_nd)."""
    n, d = np.asarray(n_params, float), np.asarray(tokens, float)
    return law["E"] + law["A"] / n ** law["alpha"] + law["B"] / d ** law["beta"]


def table_of(law: dict, rungs: list[Rung], tokens: dict, *, checkpoints: int = 12,
             min_tokens: float = 0.0, noise: Noise = Noise(), rng=None, arch: str = "arch") -> Table:
    """A study's fit table as the law draws it: per rung (tokens[n_params] training tokens) the
    checkpoints at D·k/checkpoints with tokens >= min_tokens."""
    if checkpoints < 2:
        raise FitError(f"checkpoints={checkpoints}: the envelope needs >= 2 checkpoints per run")
    rng = rng if rng is not None else np.random.default_rng(0)
    cols = {k: [] for k in ("arch", "run", "step", "n_params", "tokens", "flops", "loss")}
    for r in rungs:
        if r.n_params not in tokens:
            raise FitError(f"no token budget for the size of N={r.n_params:.6g}; give every rung its tokens")
        d = float(tokens[r.n_params]) * np.arange(1, checkpoints + 1) / checkpoints
        d = d[d >= min_tokens]
        if len(d) < 2:
            raise FitError(f"N={r.n_params:.6g}: {len(d)} checkpoint(s) from {min_tokens:.6g} tokens on; "
                           "give that size more tokens")
        loss = law_loss(law, r.n_params, d) + rng.normal(0.0, noise.run_sd) + rng.normal(0.0, noise.checkpoint_sd, len(d))
        cols["arch"] += [arch] * len(d)
        cols["run"] += [f"{arch}-N{r.n_params:.6g}"] * len(d)
        cols["step"] += list(range(1, len(d) + 1))
        cols["n_params"] += [r.n_params] * len(d)
        cols["tokens"] += list(d)
        cols["flops"] += list(d * r.flops_per_token)
        cols["loss"] += list(np.maximum(loss, 1e-6))
    return from_columns(source="bracket_design", **cols)


def shares(table: Table) -> dict:
    """{interior, smallest, largest, one_size}: shares of the envelope's log-compute grid."""
    env = approach1.envelope(table)
    return {k: float(np.mean(env.clamped == v)) for k, v in SHARES.items()}


def predict(law: dict, rungs: list[Rung], tokens: dict, *, checkpoints: int = 12, min_tokens: float = 0.0,
            noise: Noise = Noise(), draws: int = 200, seed: int = 0) -> dict:
    """The bracketing a ladder would measure: each share's mean over `draws` noisy draws of the
    law (draws=0 or zero noise: the law's own curves, one draw) and `interior_range`, the 10 % and
    90 % quantiles of the interior share over the draws."""
    noisy = noise.run_sd > 0 or noise.checkpoint_sd > 0
    n = max(int(draws), 1) if noisy else 1
    rng = np.random.default_rng(seed)
    got = [shares(table_of(law, rungs, tokens, checkpoints=checkpoints, min_tokens=min_tokens,
                           noise=noise if noisy else Noise(), rng=rng)) for _ in range(n)]
    out = {k: float(np.mean([g[k] for g in got])) for k in SHARES}
    inner = [g["interior"] for g in got]
    out["interior_range"] = [float(np.quantile(inner, 0.1)), float(np.quantile(inner, 0.9))]
    return out


def tokens_per_param_at_optimum(law: dict, n_params: float) -> float:
    """D/N where L(N, D) is lowest at the compute 6·N·D along which N is the optimum: from
    α·A/N^α = β·B/D^β (the law's stationary point at fixed N·D)."""
    a = law["alpha"] * law["A"] / n_params ** law["alpha"]
    d = (law["beta"] * law["B"] / a) ** (1.0 / law["beta"])
    return float(d / n_params)


def noise_of(found: dict, arch: str, estimator: str, checkpoints: int = 12) -> Noise:
    """A finished study's noise for `arch` (findings.json): checkpoint_sd, its residual around each
    run's trend; run_sd, the pooled seed sd less the checkpoint noise of a half-curve mean
    (that sd is of the mean over a run's second half: checkpoints/2 points)."""
    sd = float(((found.get("by_estimator") or {}).get(estimator) or {}).get("seed_sd_pooled", {}).get("sd") or 0.0)
    cs = float((found.get("checkpoint_sd") or {}).get(arch, {}).get("sd") or 0.0)
    return Noise(run_sd=float(np.sqrt(max(sd ** 2 - cs ** 2 / (checkpoints / 2), 0.0))), checkpoint_sd=cs)


def predict_study(workdir: str, tokens: list, *, checkpoints: int = 12, draws: int = 200, seed: int = 0) -> dict:
    """{arch: predict(...)} for a finished scaling study's sizes trained on other budgets, from its
    laws' estimator: each arch's L(N, D) (findings.json laws_nd), its noise (noise_of), its sizes'
    FLOPs per token and its first step (fit table, design.fit_min_step; the tokens of that step at
    the smallest batch). tokens: each size's budget, ascending N (the study's sizes in order, as
    study.tokens_by_size would give them)."""
    from linscale_jax.fit.table import load
    from linscale_jax.study import files
    from linscale_jax.study.inputs import read_json

    path = files.study_path(workdir, files.FINDINGS_JSON)
    fix = "pass the workdir of a finished scaling study (its join writes findings.json last)"
    found = read_json(path, fix)
    missing = [k for k in ("estimators", "design") if not found.get(k)]
    if missing:
        raise FitError(f"{path} has no {' or '.join(missing)}; {fix}")
    est = found["estimators"][0]
    d = found["design"]
    per_step = float(d["seq_len"]) * float(str(d["batch"]).split("..")[0])
    table = load(files.study_path(workdir, files.STUDY_FIT, files.fit_table_name(est, True)))
    out = {}
    for a in table.archs:
        entry = (found.get("laws_nd") or {}).get(est, {}).get(a) or {}
        if "law" not in entry:
            continue  # no L(N, D) for this arch: nothing to predict from
        rungs = rungs_of(table.select(a))
        if len(tokens) != len(rungs):
            raise FitError(f"{len(tokens)} token budget(s) for the {len(rungs)} sizes of {a} in {workdir}; "
                           "give one per size, ascending N")
        budget = {r.n_params: float(x) for r, x in zip(rungs, tokens)}
        out[a] = predict(entry["law"], rungs, budget, checkpoints=checkpoints,
                         min_tokens=float(d["fit_min_step"]) * per_step, noise=noise_of(found, a, est, checkpoints),
                         draws=draws, seed=seed)
    return out
