"""A study's results, computed once and written as data; report.md and the plots only render them.

    found = write(study, runs, workdir, fit_errors, wall, log)   # -> findings.json's dict

Reads DIR/fit/table*.csv (one per loss estimator) and the runs' eval rows; writes
  DIR/findings.json       verdicts (study.verdicts.judge_all; per estimator and, with
                          study.protocol_from, per learning-rate protocol), seed sds with df and
                          intervals, the paired comparisons at C*, each arch's L(N, D) with its lack
                          of fit, bracketing and the measured optimum, the retrieval probes, the runs
                          (each with its decoding memory), the loss and MQAR accuracy against the
                          state floats per layer (study.scaling.state_axis), the design and the wall time
  DIR/fit/bracketing.csv  arch, estimator, interior, smallest, largest, one_size: shares of the
                          log-compute grid where the envelope's winner is an interior size, the
                          smallest or largest size reaching that compute, or the only one
  DIR/fit/envelope.csv    every arch's envelope per estimator (compute, loss, winner N, tokens, clamped)
  DIR/holdout.csv, holdout_curves.csv, holdout.json (study.holdout)
  DIR/fit/backtest.csv    the k smallest sizes' law predicting size k + 1, every k >= 3 (scaling.laws)
  DIR/fit/backtest_tokens.csv  each run's first half of tokens predicting its end, every estimator (scaling.laws)
"""

from __future__ import annotations

import csv
import json
import os
import time

import numpy as np

from linscale_jax import contract
from linscale_jax.models.sizes import Variant
from linscale_jax.study import files
from linscale_jax.study.scaling import compare, findings, holdout, laws, plan, seed_prior, state_axis

BRACKETING_COLUMNS = ("arch", "estimator", "interior", "smallest", "largest", "one_size")
CLAMPED = {"interior": 0, "smallest": -1, "largest": 1, "one_size": 2}  # approach1.Envelope.clamped
# Tokens per parameter at the compute-optimal point: Hoffmann et al. (2022, Chinchilla), about 20
# (parameters with embeddings); Porian et al. (2024) from linscale_jax/fit/data at their largest common budget.
CHINCHILLA_TOKENS_PER_PARAM = 20.0
PORIAN = (("reproducing_kaplan", "Porian et al.: Kaplan's settings, long warmup, non-embedding count"),
          ("att_correct_warmup", "Porian et al.: warmup corrected, attention FLOPs counted"),
          ("att_optimizer_tuning_no_decay", "Porian et al.: + learning rate, batch and β2 tuned per size"))
PROTOCOL = "learning-rate protocol"


def porian_tokens_per_param(flops: float = 1.25e16, dataset: str = "rw") -> list[dict]:
    """[{config, label, tokens_per_param, n_opt}] from linscale_jax/fit/data/porian2024_optimal_pairs.csv at `flops`."""
    from linscale_jax.fit import reference

    path = reference.DATA_DIR.joinpath("porian2024_optimal_pairs.csv")
    rows = {r["config"]: r for r in csv.DictReader(path.open())
            if r["dataset"] == dataset and float(r["flops"]) == flops}
    return [dict(config=c, label=label, n_opt=float(rows[c]["n_opt"]),
                 tokens_per_param=float(rows[c]["t_opt"]) / float(rows[c]["n_opt"]))
            for c, label in PORIAN if c in rows]


def tables(study, workdir: str) -> dict:
    """{estimator: Table} of the study's fit tables (C in PF-days), the laws' first."""
    from linscale_jax.study.scaling import verdicts

    names = plan.estimators(study)
    specs = [f"{n}={files.study_path(workdir, files.STUDY_FIT, files.fit_table_name(n, i == 0))}"
             for i, n in enumerate(names)]
    return verdicts.load_tables([x for x in specs if os.path.exists(x.split("=", 1)[1])])


def bracketing(tabs: dict, workdir: str) -> dict:
    """{estimator: {arch: {interior, smallest, largest, one_size}}}; writes bracketing.csv and
    envelope.csv. An arch with too few runs for an envelope is left out."""
    from linscale_jax.fit import approach1
    from linscale_jax.fit.table import FitError

    out, env_rows = {}, []
    for est, t in tabs.items():
        out[est] = {}
        for a in t.archs:
            try:
                env = approach1.envelope(t.select(a))
            except FitError:
                continue
            out[est][a] = {k: float(np.mean(env.clamped == v)) for k, v in CLAMPED.items()}
            env_rows += [dict(arch=a, estimator=est, compute=f"{c:.6g}", loss=f"{l:.6f}", n_params=f"{n:.6g}",
                              tokens=f"{d:.6g}", clamped=int(k))
                         for c, l, n, d, k in zip(env.compute, env.loss, env.n_params, env.tokens, env.clamped)]
    fit_dir = files.study_path(workdir, files.STUDY_FIT)
    with open(os.path.join(fit_dir, files.BRACKETING_CSV), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(BRACKETING_COLUMNS)
        for est, archs in out.items():
            for a, s in archs.items():
                w.writerow([a, est, *(f"{s[k]:.4f}" for k in BRACKETING_COLUMNS[2:])])
    with open(os.path.join(fit_dir, files.ENVELOPE_CSV), "w", newline="") as f:
        w = csv.DictWriter(f, ("arch", "estimator", "compute", "loss", "n_params", "tokens", "clamped"))
        w.writeheader()
        w.writerows(env_rows)
    return out


def optimum(table, counts: dict) -> dict:
    """Per arch, where its envelope (the laws' estimator) is interior: the measured N_opt and D_opt
    and tokens per parameter at the optimum under the paper's count (Table 1, non-embedding), the
    parameter tree's non-embedding count and the count with embedding and head. `counts`: {arch:
    {table n_params: {"paper", "total"}}} from the model configs' accounting."""
    from linscale_jax.fit import approach1
    from linscale_jax.fit.table import FitError

    out = {}
    for a in table.archs:
        try:
            env = approach1.envelope(table.select(a))
        except FitError:
            continue
        inner = env.clamped == 0
        r = dict(interior=float(np.mean(inner)), points=int(inner.sum()))
        if inner.any():
            n, d, c = env.n_params[inner], env.tokens[inner], env.compute[inner]
            by = {"non_embedding": n,
                  "paper": np.array([counts.get(a, {}).get(float(x), {}).get("paper", np.nan) for x in n]),
                  "total": np.array([counts.get(a, {}).get(float(x), {}).get("total", np.nan) for x in n])}
            r.update(compute=[float(c.min()), float(c.max())], d_opt=[float(d.min()), float(d.max())],
                     n_opt={k: [float(np.nanmin(v)), float(np.nanmax(v))] for k, v in by.items()
                            if np.isfinite(v).any()},
                     tokens_per_param={k: dict(median=float(np.nanmedian(d / v)), low=float(np.nanmin(d / v)),
                                               high=float(np.nanmax(d / v)))
                                       for k, v in by.items() if np.isfinite(v).any()})
        out[a] = r
    return out


def param_counts(runs) -> dict:
    """{arch: {non-embedding N: {"paper": Table-1 N, "total": with embedding and head}}} from each
    run's model config (linscale_jax.models.accounting)."""
    from linscale_jax.models import ModelConfig, accounting

    out = {}
    for r in runs:
        mc = ModelConfig.from_config(r.config.model)
        out.setdefault(r.arch, {})[float(r.n_params)] = dict(paper=float(accounting.paper_params(mc)),
                                                             total=float(accounting.param_counts(mc)["total"]))
    return out


def decode_memory(run) -> dict:
    """What decoding one sequence of the run's model holds (linscale_jax.models.accounting):
    {kv_bytes_per_token: what its softmax layers' KV caches add per token, state_floats_per_layer:
    the mean per layer at the trained context (train.seq_len), softmax_layers, layers}."""
    from linscale_jax.models import ModelConfig, accounting, registry

    mc = ModelConfig.from_config(run.config.model)
    return dict(kv_bytes_per_token=accounting.kv_cache_bytes_per_token(mc),
                state_floats_per_layer=float(accounting.state_floats_per_layer(mc, int(run.config.train.seq_len))),
                softmax_layers=sum(registry.get(a).softmax_block for a in mc.layer_archs), layers=mc.n_layers)


def _final_rows(run) -> dict:
    from linscale_jax.eval.runner import read_results

    rows = read_results(run.workdir) if os.path.exists(run.workdir) else []
    last = max((r["step"] for r in rows), default=None)
    return {r["task"]: r for r in rows if r["step"] == last}


def timing(run) -> dict:
    """The sums over a run's invocations in <run>/timing.jsonl (train, eval, cooldowns and their
    compile); all zero without the file, ValueError naming the file and line when one is not JSON."""
    path = os.path.join(run.workdir, files.TIMING)
    keys = ("train_s", "train_compile_s", "eval_s", "eval_compile_s", "cooldown_s", "cooldown_compile_s")
    tot = dict.fromkeys(keys, 0.0)
    if os.path.exists(path):
        with open(path) as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    for k in keys:
                        tot[k] += float(row.get(k, 0.0))
                except (ValueError, TypeError, AttributeError) as e:
                    raise ValueError(f"{path}:{i} is not a timing row ({e}); delete that line (it only "
                                     "counts seconds) and rerun") from None
    return tot


def run_rows(runs, workdir: str, counts: dict) -> list[dict]:
    """Per run: its size, counts, budget, final val_loss / probe / NIAH, timing sums and decoding
    memory (decode_memory)."""
    out = []
    for r in runs:
        fr = _final_rows(r)
        niah = next(((t, row) for t, row in fr.items() if t.startswith("niah")), (None, {}))
        heat = niah[1].get("niah_heatmap")
        out.append(dict(name=r.name, arch=r.arch, size=r.size, seed=r.seed, n_params=r.n_params,
                        **counts.get(r.arch, {}).get(float(r.n_params), {}), steps=r.steps, tokens=r.tokens,
                        pf_days=r.pf_days, val_loss=fr.get("val_loss", {}).get("val_loss"),
                        probe_acc=fr.get("probe", {}).get("probe_acc"),
                        probe_items=fr.get("probe", {}).get("probe_items"),
                        probe_chance=fr.get("probe", {}).get("probe_chance"),
                        niah_task=niah[0], niah_weighted_acc=niah[1].get("niah_weighted_acc"),
                        niah_score=niah[1].get("niah_score"),
                        niah_heatmap=os.path.relpath(heat, workdir) if heat else None, timing=timing(r),
                        **decode_memory(r)))
    return out


def probes(rows: list[dict], workdir: str, seed: int, runs=()) -> dict:
    """NIAH and the line probe of each arch's largest model (seed 0): accuracies and, where the
    positive control passes (study.compare), the baseline minus each arch; else `not_measured` with
    the reason. NIAH counts only cells whose prompt and answer lie within the run's trained context
    (eval.niah.in_context_max; a sweep at longer lengths, e.g. the paper's grid, keeps its shorter
    cells); without any, NIAH is not measured, with plan.niah_unmeasured's reason."""
    from linscale_jax.eval import niah

    seq = {r.name: int(r.config.train.seq_len) for r in runs}
    largest = {}
    for r in rows:
        if not r["seed"] and (r["arch"] not in largest or r["n_params"] > largest[r["arch"]]["n_params"]):
            largest[r["arch"]] = r
    cells, acc, n_items, chance, swept = {}, {}, {}, 0.25, False
    for a, r in largest.items():
        js = r["niah_heatmap"] and os.path.join(workdir, os.path.splitext(r["niah_heatmap"])[0] + ".json")
        if js and os.path.exists(js):
            sweep, swept = json.load(open(js)), True
            inside = [i for i, n in enumerate(sweep["lengths"])
                      if r["name"] not in seq or n <= niah.in_context_max(seq[r["name"]])]
            if inside:
                cells[a] = ((np.asarray(sweep["scores"], float)[inside] - 1.0) / 9.0).ravel()
        if r["probe_acc"] is not None:
            acc[a], n_items[a] = float(r["probe_acc"]), int(r["probe_items"])
            chance = float(r.get("probe_chance") or chance)
    out = {}
    if cells:
        out["niah"] = compare.niah_comparison(cells, seed=seed)
    else:
        why = next((w for w in (plan.niah_unmeasured(r.config) for r in runs if getattr(r, "final", True))
                    if w), None) or ("no NIAH cell lies within the trained context" if swept else None)
        if why:
            out["niah"] = dict(by_arch={}, minus_baseline={}, control=None, not_measured=why)
    if acc:
        out["probe"] = compare.probe_comparison(acc, n_items, chance)
    return out


def design(study, runs) -> dict:
    c = runs[0].config
    return dict(archs=contract.split_list(study.archs, "study.archs"), sizes=contract.split_list(study.sizes, "study.sizes"), runs=len(runs),
                tokens=runs[0].tokens, tokens_by_size=tokens_by_size(runs), steps=spread(runs, lambda r: r.steps),
                batch=spread(runs, lambda r: r.config.train.batch_size), seq_len=int(c.train.seq_len),
                lr=spread(runs, lambda r: r.config.optim.lr), b2=spread(runs, lambda r: r.config.optim.b2),
                schedule=str(c.optim.schedule), warmup=spread(runs, lambda r: r.config.optim.warmup_steps),
                protocol=next((r.config.optim.get("rule", None) for r in runs if not Variant.parse(r.arch).is_variant),
                              c.optim.get("rule", None)),  # variants pin their arch's settings
                data_task=str(c.data.task),
                vocab=str(c.data.get("vocab", "")), vocab_size=int(c.model.vocab_size),
                fit_min_step=plan.fit_min_step(runs), approach=int(study.fit.approach),
                bootstrap=int(study.fit.bootstrap), include_clamped=bool(study.fit.include_clamped))


def tokens_by_size(runs) -> dict | None:
    """{size: tokens} when the sizes train on different budgets (study.tokens_by_size), else None."""
    by = {r.size: r.tokens for r in runs}
    return by if len(set(by.values())) > 1 else None


def spread(runs, value) -> str:
    """'8' when every run has the same value, else 'lo..hi' over the runs (a learning-rate rule's
    lr, batch, β2, warmup and steps per arch and size)."""
    vals = sorted({value(r) for r in runs})
    return f"{vals[0]:g}" if len(vals) == 1 else f"{vals[0]:g}..{vals[-1]:g}"


def protocol_sources(study, runs: list) -> tuple[dict | None, str]:
    """(findings.json of the study named by study.protocol_from, its workdir) or (None, ''): the
    other learning-rate protocol on the same runs (study.inputs.other_protocol)."""
    from linscale_jax.study import inputs

    src = str(study.get("protocol_from", "") or "")
    if not src:
        return None, ""
    path = files.study_path(src, files.FINDINGS_JSON)
    if not os.path.exists(path):
        raise FileNotFoundError(f"study.protocol_from={src!r} has no {files.FINDINGS_JSON}; run the other "
                                "learning-rate protocol's study first "
                                f"(`python -m linscale_jax.study --config=... --workdir={src}`)")
    return inputs.other_protocol(src, design(study, runs)), src


def by_protocol(found: dict, own_label: str, other: dict, src: str) -> dict:
    """Every finding (and finding-2/1 arch) judged under both protocols: {label: verdict}, and the
    verdict 'depends on the learning-rate protocol' where they disagree."""
    from linscale_jax.study.scaling import verdicts

    other_label = (other.get("design") or {}).get("protocol") or "protocol_from"
    if other_label == own_label:
        other_label = f"{other_label} ({os.path.basename(os.path.normpath(src))})"
    out = dict(labels=[own_label, other_label], source=src)
    for key, f in found["findings"].items():
        g = other["findings"].get(key, {})
        for mine, theirs in ((f, g), *((r, g.get("archs", {}).get(a, {})) for a, r in f.get("archs", {}).items())):
            t = theirs.get("own_verdict") or theirs.get("verdict", "not measured")
            mine["own_verdict"] = mine["verdict"]
            mine["by_protocol"] = {own_label: mine["verdict"], other_label: t}
            heads = {k: v.split(":", 1)[0] for k, v in mine["by_protocol"].items()}  # retrieval: verdict: why
            if len(set(heads.values())) > 1:
                mine["verdict"] = verdicts.combine(heads, PROTOCOL)
    return out


def write(study, runs, workdir: str, fit_errors: dict | None = None, wall: dict | None = None,
          log=print) -> dict:
    """Compute and write the study's results (module docstring); returns findings.json's dict.
    `wall`: {runs_s, workers, t0} of this invocation (t0: when the join began)."""
    from linscale_jax.fit.bootstrap import SeedSd
    from linscale_jax.study.scaling import verdicts

    tabs = tables(study, workdir)
    first = next(iter(tabs))
    v = study.get("verdicts", {})
    recall_rows, recall_src = findings.recall_rows_from(study)
    prior_spec = str(study.get("noise", {}).get("prior", "") or "")
    priors, prior_note = seed_prior.for_design(prior_spec, design(study, runs))
    found = verdicts.judge_all(tabs, recall_rows, recall_src, priors=priors,
                               margin=float(v.get("margin", verdicts.DEFAULT_MARGIN)),
                               tolerance=float(v.get("tolerance", verdicts.DEFAULT_TOLERANCE)),
                               seed_sd=float(study.get("noise", {}).get("seed_sd", 0.0)) or None,
                               n_boot=max(int(study.fit.bootstrap), 20), seed=int(study.fit.seed))
    per = found["by_estimator"]
    found["seed_sd_prior"] = prior_note
    found.update(common_compute=per[first]["common_compute"], law_at_common_compute=per[first]["law_at_common_compute"],
                 n_boot=per[first]["n_boot"], checkpoint_sd=compare.checkpoint_sd(tabs[first]))
    seed_sd = SeedSd.of(per[first]["seed_sd_pooled"])
    found["holdout"] = holdout.write(tabs[first], seed_sd, workdir, n_boot=max(int(study.fit.bootstrap), 20),
                                     seed=int(study.fit.seed))
    found["laws_nd"] = laws_nd(tabs, per)
    found["bracketing"] = bracketing(tabs, workdir)
    counts = param_counts(runs)
    found.update(laws.write(study, tabs, per, seed_sd, counts, workdir))  # laws_by_size, backtest
    found["optimum"] = optimum(tabs[first], counts)
    found["reference_tokens_per_param"] = dict(chinchilla=CHINCHILLA_TOKENS_PER_PARAM,
                                               porian=porian_tokens_per_param())
    found["runs"] = run_rows(runs, workdir, counts)
    found["probes"] = probes(found["runs"], workdir, int(study.fit.seed), runs)
    found["state_axis"] = state_axis.fit(found["runs"], recall_src, float(v.get("margin", verdicts.DEFAULT_MARGIN)))
    held = [(h["diff"], a) for a, r in found["findings"]["power_laws"]["archs"].items() for h in r.get("holdout") or []]
    found["findings"]["power_laws"]["bias"] = holdout.bias([e for e, _ in held], [a for _, a in held])
    found["design"] = design(study, runs)
    found["fit_errors"] = fit_errors or {}
    other, src = protocol_sources(study, runs)
    if other is not None:
        found["protocols"] = by_protocol(found, found["design"]["protocol"] or "this study", other, src)
    if wall is not None:
        found["wall"] = dict(runs_s=wall.get("runs_s"), workers=wall.get("workers", 1),
                             fit_s=time.time() - wall["t0"])
    found = verdicts.plain(found)
    with open(files.study_path(workdir, files.FINDINGS_JSON), "w") as f:
        json.dump(found, f, indent=2)
    return found


def laws_nd(tabs: dict, per: dict) -> dict:
    """{estimator: {arch: fit.holdout.full_law}}: approach 3 on every size, its lack of fit against
    the estimator's pooled seed sd."""
    from linscale_jax.fit import holdout as fh
    from linscale_jax.fit.bootstrap import SeedSd
    from linscale_jax.fit.table import FitError

    out = {}
    for est, t in tabs.items():
        sd = SeedSd.of(per[est]["seed_sd_pooled"])
        out[est] = {}
        for a in t.archs:
            try:
                out[est][a] = fh.full_law(t.select(a), sd)
            except FitError as e:
                out[est][a] = dict(note=str(e))
    return out
