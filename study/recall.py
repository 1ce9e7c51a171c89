"""Miniature retrieval: train every architecture on MQAR (linscale_jax.data.mqar) and measure recall
against the size of its decoding state.

    python -m study --config=configs/study/recall.py --workdir=DIR
    rows = run_recall(study, workdir)
    v = verdict_input(DIR + "/recall.csv")   # scored rows, positive control, "did not train" cells

Runs: arch × shape × seed × lr (a shape "d64e16" is d_model 64 with head dim 16; study.n_layers
layers; GLU width 8·ceil(int(8d/3)/8)). Each run trains the model (the project's model code, train
step and AdamW) on MQAR sequences whose number of key-value pairs is drawn from study.n_pairs
(Zoology's mixture training), for at most study.max_steps steps: every study.eval_every steps its
accuracy on study.val_sequences validation sequences is measured and training stops once it
reaches study.stop_accuracy (Zoology's early stopping). The final parameters are scored on
study.eval_sequences fresh test sequences per number of pairs: accuracy = share of query positions
whose argmax prediction is the stored value, with a 95 % Wilson score interval over the queries.

Learning rate: study.lr is one rate ("3e-3"), or per arch ("llama:1e-3,tnl:3e-3,..."), where a
value may list several rates separated by "/" (a sweep): per (arch, shape) the rate with the best
mean final validation accuracy over the seeds is kept (Zoology reports the best of its sweep).

"Did not train": a run whose test cross-entropy on the queries stays within study.dnt_margin nats of
ln(n_values) (the loss of the values' marginal distribution) has learnt nothing about the context;
its cells get status "did_not_train" and are never scored as recall results.

Seeds: each cell's "all" row is the mean accuracy over the seeds, with an interval from the lowest
to the highest of the seeds' 95 % Wilson intervals, so it holds both the query noise and the seed
spread. A cell with any seed that did not train is "did_not_train".

Writes DIR/recall.csv (COLUMNS: one row per cell and seed, plus the cell's seed "all" row),
DIR/recall_runs.csv (every run, every lr), DIR/recall.png (accuracy against state floats per layer,
one line per arch, a panel per number of pairs) and the "Recall (MQAR)" section of DIR/report.md.
Resumable: each run keeps DIR/runs/<run>/result.json and is not retrained while its settings hold.
State floats per layer come from the architecture registry (ArchSpec.state_floats: linear mixers'
h·k·e, LLaMA's KV cache 2·d·seq_len).
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
import os
import re
import time

import numpy as np

COLUMNS = ("arch", "d_model", "n_pairs", "seq_len", "accuracy", "ci_low", "ci_high", "state_floats",
           "seed", "status", "head_dim", "n_layers", "lr", "steps", "test_loss", "queries", "n_params")
RUN_COLUMNS = ("run", "arch", "d_model", "head_dim", "seed", "lr", "steps", "stopped_early",
               "val_accuracy", "test_loss", "status", "seconds")
SECTION = "## Recall (MQAR)"
TRAINED, DID_NOT_TRAIN = "ok", "did_not_train"
CONTROL_ARCH, CONTROL_ACCURACY = "llama", 0.9


def _print(msg: str) -> None:
    print(msg, flush=True)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial proportion k/n."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def split_list(value) -> list[str]:
    return [x.strip() for x in str(value).split(",") if x.strip()]


def parse_shape(shape: str) -> tuple[int, int]:
    """'d64e16' -> (d_model 64, head dim 16)."""
    m = re.fullmatch(r"d(\d+)e(\d+)", shape.strip())
    if not m or int(m.group(1)) % int(m.group(2)):
        raise ValueError(f"recall shape {shape!r}: write d<d_model>e<head dim> with the head dim "
                         "dividing d_model, e.g. d64e16")
    return int(m.group(1)), int(m.group(2))


def learning_rates(study, arch: str) -> list[float]:
    """The rates study.lr gives `arch`: '3e-3', or 'llama:1e-3,tnl:3e-3/1e-2' (a '/' list sweeps)."""
    spec = str(study.lr)
    if ":" not in spec:
        return [float(x) for x in spec.split("/")]
    table = dict(item.split(":", 1) for item in split_list(spec))
    if arch not in table:
        raise ValueError(f"study.lr={spec!r} gives no rate for {arch!r}; add '{arch}:<lr>'")
    return [float(x) for x in table[arch].split("/")]


def did_not_train(test_loss: float, n_values: int, margin: float) -> bool:
    """True when the query cross-entropy is within `margin` nats of ln(n_values) or above it:
    the model predicts the values' marginal distribution and has not used the context."""
    return not test_loss < math.log(n_values) - margin


def model_config(study, arch: str, d: int, e: int):
    from linscale_jax.data import mqar
    from linscale_jax.models import ModelConfig, sizes

    return ModelConfig(arch=arch, size=f"d{d}e{e}", n_layers=int(study.n_layers), d_model=d,
                       n_heads=d // e, ffn_dim=sizes.paper_ffn_dim(d, 8),
                       vocab_size=mqar.vocab_size(int(study.n_keys), int(study.n_values)),
                       max_seq_len=int(study.seq_len))


def mqar_options(study) -> dict:
    return dict(n_pairs=[int(p) for p in split_list(study.n_pairs)], n_keys=int(study.n_keys),
                n_values=int(study.n_values), placement=str(study.placement),
                power_a=float(study.power_a))


@dataclasses.dataclass
class Run:
    """One training run (the fields workers.run_parallel reads: name, workdir, steps, n_params,
    flops_exact)."""

    arch: str
    d_model: int
    head_dim: int
    seed: int
    lr: float
    workdir: str
    steps: int  # at most; early stopping may end sooner
    n_params: int
    flops_exact: float
    state_floats: int

    @property
    def name(self) -> str:
        return f"{self.arch}-d{self.d_model}e{self.head_dim}-s{self.seed}-lr{self.lr:g}"

    def settings(self, study) -> dict:
        """What the run's result depends on, the full model config included (a stored result is
        reused only if these match)."""
        keys = ("n_layers", "n_pairs", "n_keys", "n_values", "placement", "power_a", "seq_len",
                "batch_size", "max_steps", "warmup_steps", "schedule", "weight_decay", "eval_every",
                "val_sequences", "stop_accuracy", "eval_sequences")
        return dict(arch=self.arch, d_model=self.d_model, head_dim=self.head_dim, seed=self.seed,
                    lr=self.lr, model=model_config(study, self.arch, self.d_model, self.head_dim).to_dict(),
                    **{k: str(study[k]) for k in keys})


def build_runs(study, workdir: str) -> list[Run]:
    from linscale_jax.models import accounting, registry

    seq_len, runs = int(study.seq_len), []
    tokens = int(study.max_steps) * int(study.batch_size) * seq_len
    for arch in split_list(study.archs):
        for shape in split_list(study.shapes):
            d, e = parse_shape(shape)
            mc = model_config(study, arch, d, e)
            for lr in learning_rates(study, arch):
                for seed in (int(s) for s in split_list(study.seeds)):
                    run = Run(arch, d, e, seed, lr, "", int(study.max_steps),
                              accounting.param_counts(mc)["non_embedding"],
                              3 * accounting.flops_per_token_exact(mc, seq_len) * tokens,
                              int(registry.get(arch).state_floats(mc, seq_len)))
                    run.workdir = os.path.join(workdir, "runs", run.name)
                    runs.append(run)
    return runs


def _evaluator(graphdef):
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    @jax.jit
    def sums(params, rest, batch):
        """(correct queries, queries, summed query cross-entropy) of one batch."""
        logits = nnx.merge(graphdef, params, rest)(batch["inputs"]).astype(jnp.float32)
        q = batch["weights"] > 0
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
        return (jnp.sum((jnp.argmax(logits, -1) == batch["targets"]) & q), jnp.sum(q),
                jnp.sum(jnp.where(q, ce, 0.0)))

    def evaluate(params, rest, batches) -> tuple[int, int, float]:
        k = n = 0
        loss = 0.0
        for b in batches:
            c, m, l = sums(params, rest, b)
            k, n, loss = k + int(c), n + int(m), loss + float(l)
        return k, n, loss

    return evaluate


def train_run(study, run: Run, log=_print) -> dict:
    """Train one run with early stopping, then score it per number of pairs (module doc)."""
    import jax
    import ml_collections
    from flax import nnx

    from linscale_jax.dist import sharding
    from linscale_jax.train import loop as trainer
    from linscale_jax.train import optim
    from linscale_jax.data import mqar
    from linscale_jax.models import build_model

    opts = mqar_options(study)
    mc = model_config(study, run.arch, run.d_model, run.head_dim)
    seq_len, bs = int(study.seq_len), int(study.batch_size)
    parts = sharding.model_parts(mc, run.seed)
    ocfg = ml_collections.ConfigDict(dict(
        lr=run.lr, weight_decay=float(study.weight_decay), b1=0.9, b2=0.95, eps=1e-8, schedule=str(study.schedule),
        warmup_steps=int(study.warmup_steps), min_lr_ratio=0.1, decay_fraction=0.2, clip_norm=1.0))
    tx = optim.make_optimizer(ocfg, run.steps, parts.param_axes, parts.abstract_params)
    _, params, rest = nnx.split(build_model(mc, nnx.Rngs(run.seed)), nnx.Param, ...)
    params = nnx.to_pure_dict(params)
    opt_state = tx.init(params)
    step_fn = jax.jit(trainer.make_train_step(parts.graphdef, tx, 1), donate_argnums=(0, 1))
    evaluate = _evaluator(parts.graphdef)

    def stream(split, seed):
        """Batch i of a split: rng(seed, split, i) as in mqar.MQARRows, P drawn per row from n_pairs."""
        for i in itertools.count():
            rng = np.random.default_rng([seed, mqar.SPLITS[split], i, 0, 1])
            pairs = rng.choice(opts["n_pairs"], size=bs)
            yield mqar.batch(rng, bs, seq_len, pairs, opts["n_keys"], opts["n_values"], opts["placement"],
                             opts["power_a"])

    train = stream("train", run.seed)
    val_it = stream("validation", 0)  # one validation set for every run
    val = [next(val_it) for _ in range(max(1, int(study.val_sequences) // bs))]
    every, stop_at = int(study.eval_every), float(study.stop_accuracy)
    t0, losses, history, step, acc = time.time(), [], [], 0, 0.0
    while step < run.steps:
        params, opt_state, m = step_fn(params, opt_state, rest, next(train))
        step += 1
        losses.append(m["loss"])
        if step % every == 0 or step == run.steps:
            k, n, vl = evaluate(params, rest, val)
            acc, train_loss = k / max(n, 1), float(np.mean(jax.device_get(losses)))
            losses = []
            history.append(dict(step=step, train_loss=train_loss, val_loss=vl / max(n, 1), val_accuracy=acc))
            el = time.time() - t0
            log(f"[recall] {run.name} step {step}/{run.steps} | train loss {train_loss:.3f} | val loss "
                f"{vl / max(n, 1):.3f} | val accuracy {acc:.3f} | {step * bs * seq_len / el:,.0f} tok/s | "
                f"{el:.0f}s")
            if acc >= stop_at:
                break
    per_pairs, k_all, n_all, loss_all = {}, 0, 0, 0.0
    n_seq = int(study.eval_sequences)
    for p in opts["n_pairs"]:
        rng = np.random.default_rng([run.seed, mqar.SPLITS["test"], p])
        batches = [mqar.batch(rng, min(bs, n_seq - s), seq_len, p, opts["n_keys"], opts["n_values"],
                              opts["placement"], opts["power_a"]) for s in range(0, n_seq, bs)]
        k, n, loss = evaluate(params, rest, batches)
        per_pairs[str(p)] = dict(correct=k, queries=n, loss=loss / max(n, 1))
        k_all, n_all, loss_all = k_all + k, n_all + n, loss_all + loss
    test_loss = loss_all / max(n_all, 1)
    status = DID_NOT_TRAIN if did_not_train(test_loss, opts["n_values"], float(study.dnt_margin)) else TRAINED
    return dict(settings=run.settings(study), steps=step, stopped_early=step < run.steps,
                val_accuracy=acc, test_loss=test_loss, status=status, per_pairs=per_pairs,
                history=history, seconds=time.time() - t0)


def result_path(run: Run) -> str:
    return os.path.join(run.workdir, "result.json")


def load_result(study, run: Run) -> dict | None:
    """The stored result of `run`, if its settings match the study's."""
    try:
        with open(result_path(run)) as f:
            res = json.load(f)
    except (OSError, ValueError):
        return None
    return res if res.get("settings") == json.loads(json.dumps(run.settings(study))) else None


def process_run(study, run: Run, log=_print, final: bool = True) -> dict:
    """Train and score `run` unless its result is stored; write DIR/runs/<run>/result.json."""
    res = load_result(study, run)
    if res is None:
        res = train_run(study, run, log)
        os.makedirs(run.workdir, exist_ok=True)
        tmp = result_path(run) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, result_path(run))
    log(f"[recall] {run.name}: {res['status']}, {res['steps']} steps, test loss {res['test_loss']:.3f}, "
        + ", ".join(f"P={p}: {v['correct'] / max(v['queries'], 1):.3f}" for p, v in res["per_pairs"].items()))
    return res


def run_recall(study, workdir: str, log=_print) -> list[dict]:
    from study import workers

    os.makedirs(workdir, exist_ok=True)
    runs, t0 = build_runs(study, workdir), time.time()
    todo = [r for r in runs if load_result(study, r) is None]
    n_workers = max(1, min(int(study.workers), len(todo)))
    log(f"[recall] {len(runs)} runs ({len(runs) - len(todo)} stored), {n_workers} worker(s); "
        f"at most {study.max_steps} steps × {study.batch_size} sequences of {study.seq_len} tokens each")
    if n_workers > 1:
        out = workers.run_parallel(study, todo, {r.name: True for r in todo}, n_workers, process_run, log)
        if out["failed"]:
            raise workers.RunsFailed("recall runs failed: " + "; ".join(f"{k}: {v}" for k, v in
                                                                        out["failed"].items()))
        if out["stopped"]:
            raise KeyboardInterrupt(f"recall runs stopped: {out['stopped']}; re-run to resume")
    else:
        for i, r in enumerate(todo):
            log(f"[recall] run {i + 1}/{len(todo)}: {r.name} | elapsed {time.time() - t0:.0f}s")
            process_run(study, r, log)
    results = {r.name: load_result(study, r) for r in runs}
    write_runs_csv(runs, results, os.path.join(workdir, "recall_runs.csv"))
    rows = cell_rows(runs, results, study)
    write_csv(rows, os.path.join(workdir, "recall.csv"))
    plot(rows, study, os.path.join(workdir, "recall.png"))
    update_report(os.path.join(workdir, "report.md"), report_section(rows, runs, results, study))
    log(f"[recall] wrote {workdir}/recall.csv, recall_runs.csv, recall.png, report.md in "
        f"{time.time() - t0:.0f}s")
    return rows


def best_lr(runs: list[Run], results: dict) -> dict:
    """{(arch, d, e): lr} with the best mean final validation accuracy over the seeds."""
    score = {}
    for r in runs:
        score.setdefault((r.arch, r.d_model, r.head_dim), {}).setdefault(r.lr, []).append(
            results[r.name]["val_accuracy"])
    return {k: max(v, key=lambda lr: (np.mean(v[lr]), -lr)) for k, v in score.items()}


def cell_rows(runs: list[Run], results: dict, study) -> list[dict]:
    """recall.csv rows: per (arch, shape, n_pairs) one row per seed (at the selected lr) and the
    seed "all" row (module doc)."""
    chosen, seq_len, rows = best_lr(runs, results), int(study.seq_len), []
    for (arch, d, e), lr in chosen.items():
        mine = [r for r in runs if (r.arch, r.d_model, r.head_dim, r.lr) == (arch, d, e, lr)]
        for p in split_list(study.n_pairs):
            seeds = []
            for r in mine:
                res = results[r.name]
                c = res["per_pairs"][p]
                lo, hi = wilson(c["correct"], c["queries"])
                seeds.append(dict(arch=arch, d_model=d, n_pairs=int(p), seq_len=seq_len,
                                  accuracy=c["correct"] / max(c["queries"], 1), ci_low=lo, ci_high=hi,
                                  state_floats=r.state_floats, seed=r.seed, status=res["status"],
                                  head_dim=e, n_layers=int(study.n_layers), lr=lr, steps=res["steps"],
                                  test_loss=c["loss"], queries=c["queries"], n_params=r.n_params))
            rows += seeds
            status = DID_NOT_TRAIN if any(s["status"] == DID_NOT_TRAIN for s in seeds) else TRAINED
            rows.append(dict(seeds[0], seed="all", status=status,
                             accuracy=float(np.mean([s["accuracy"] for s in seeds])),
                             ci_low=min(s["ci_low"] for s in seeds), ci_high=max(s["ci_high"] for s in seeds),
                             steps=int(np.mean([s["steps"] for s in seeds])),
                             test_loss=float(np.mean([s["test_loss"] for s in seeds])),
                             queries=sum(s["queries"] for s in seeds)))
    return rows


def _fmt(v):
    return f"{v:.4f}" if isinstance(v, float) else v


def write_csv(rows: list[dict], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(r[k]) for k in COLUMNS})


def write_runs_csv(runs: list[Run], results: dict, path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RUN_COLUMNS)
        w.writeheader()
        for r in runs:
            res = results[r.name]
            w.writerow({k: _fmt(v) for k, v in dict(
                run=r.name, arch=r.arch, d_model=r.d_model, head_dim=r.head_dim, seed=r.seed, lr=r.lr,
                steps=res["steps"], stopped_early=res["stopped_early"], val_accuracy=res["val_accuracy"],
                test_loss=res["test_loss"], status=res["status"], seconds=res["seconds"]).items()})


def read_csv(path: str) -> list[dict]:
    """recall.csv rows with numeric fields (seed stays a string: an integer or "all")."""
    ints = ("d_model", "n_pairs", "seq_len", "state_floats", "head_dim", "n_layers", "steps", "queries",
            "n_params")
    floats = ("accuracy", "ci_low", "ci_high", "lr", "test_loss")
    with open(path) as f:
        return [{k: (int(v) if k in ints else float(v) if k in floats else v) for k, v in r.items()}
                for r in csv.DictReader(f)]


def control(rows: list[dict]) -> dict:
    """The positive control: LLaMA reaches CONTROL_ACCURACY (seed mean) in at least one trained
    cell. {met, best (LLaMA's best seed-mean accuracy, None without a trained LLaMA cell), cell}."""
    ll = [r for r in rows if r["arch"] == CONTROL_ARCH and r["seed"] == "all" and r["status"] == TRAINED]
    if not ll:
        return dict(met=False, best=None, cell=None)
    top = max(ll, key=lambda r: r["accuracy"])
    return dict(met=top["accuracy"] >= CONTROL_ACCURACY, best=top["accuracy"],
                cell=(top["d_model"], top["head_dim"], top["n_pairs"]))


def verdict_input(path: str) -> dict:
    """What a verdict on recall may use, from DIR/recall.csv: {rows: the seed "all" rows of cells
    that trained, control: control(), did_not_train: [(arch, d_model, head_dim, n_pairs)]}.
    Without control["met"] the recall comparison is "not measured"."""
    rows = read_csv(path)
    cells = [r for r in rows if r["seed"] == "all"]
    return dict(rows=[r for r in cells if r["status"] == TRAINED], control=control(rows),
                did_not_train=[(r["arch"], r["d_model"], r["head_dim"], r["n_pairs"]) for r in cells
                               if r["status"] != TRAINED])


def plot(rows: list[dict], study, path: str) -> None:
    """Accuracy (seed mean, interval incl. the seed spread) against state floats per layer, one line
    per arch, one panel per number of pairs; cells that did not train are grey crosses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [r for r in rows if r["seed"] == "all"]
    pairs = sorted({r["n_pairs"] for r in cells})
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 3.6), squeeze=False, sharey=True)
    chance = 1 / int(study.n_values)
    for ax, p in zip(axes[0], pairs):
        for i, arch in enumerate(dict.fromkeys(r["arch"] for r in cells)):
            mine = sorted((r for r in cells if r["arch"] == arch and r["n_pairs"] == p),
                          key=lambda r: r["state_floats"])
            ok = [r for r in mine if r["status"] == TRAINED]
            bad = [r for r in mine if r["status"] != TRAINED]
            if ok:
                y = np.array([r["accuracy"] for r in ok])
                err = np.array([y - [r["ci_low"] for r in ok], [r["ci_high"] for r in ok] - y])
                ax.errorbar([r["state_floats"] for r in ok], y, yerr=err, marker="o", capsize=3,
                            label=arch, color=f"C{i}")
            if bad:
                ax.scatter([r["state_floats"] for r in bad], [r["accuracy"] for r in bad], marker="x",
                           color=f"C{i}", alpha=0.6, label=f"{arch}: did not train")
        ax.axhline(chance, color="grey", lw=0.8, ls=":")
        ax.axhline(1 / p, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{p} key-value pairs (dashed: 1/{p}, dotted: chance)", fontsize=9)
        ax.set_xlabel("state floats per layer")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("MQAR accuracy (seed mean, 95%)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report_section(rows: list[dict], runs: list[Run], results: dict, study) -> str:
    cells = [r for r in rows if r["seed"] == "all"]
    ctl = control(rows)
    seeds = split_list(study.seeds)
    lines = [SECTION, "",
             f"Multi-query associative recall (Arora et al. 2023, Zoology): {study.n_layers}-layer models "
             f"trained on MQAR sequences of {study.seq_len} tokens with {{{study.n_pairs}}} key-value "
             f"pairs (distinct keys and values, {study.n_keys} keys, {study.n_values} values, "
             f"{study.placement} query placement), batch {study.batch_size}, at most {study.max_steps} "
             f"steps, stopping once the validation accuracy reaches {study.stop_accuracy}; "
             f"{len(seeds)} seeds; scored on {study.eval_sequences} test sequences per number of "
             f"pairs. Accuracy is the seed mean; its interval spans the seeds' 95 % Wilson intervals. "
             f"Chance is 1/{study.n_values}; 'did not train' = test loss within {study.dnt_margin} "
             f"nats of ln {study.n_values}.", "", "![MQAR accuracy against state size](recall.png)", "",
             "| arch | d | head dim | state floats/layer | lr | " +
             " | ".join(f"P={p}" for p in split_list(study.n_pairs)) + " | steps |",
             "|---|---|---|---|---|" + "---|" * len(split_list(study.n_pairs)) + "---|"]
    for key in dict.fromkeys((r["arch"], r["d_model"], r["head_dim"]) for r in cells):
        mine = [r for r in cells if (r["arch"], r["d_model"], r["head_dim"]) == key]
        accs = [("did not train" if r["status"] != TRAINED else
                 f"{r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]") for r in mine]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {mine[0]['state_floats']} | {mine[0]['lr']:g} | "
                     + " | ".join(accs) + f" | {mine[0]['steps']} |")
    lines += ["", control_sentence(ctl), ""]
    return "\n".join(lines)


def control_sentence(ctl: dict) -> str:
    if ctl["best"] is None:
        return ("Positive control **not met**: no LLaMA cell trained, so the recall comparison is "
                "not measured.")
    d, e, p = ctl["cell"]
    return (f"Positive control {'met' if ctl['met'] else '**not met**'}: LLaMA's best cell "
            f"(d {d}, {p} pairs) reaches {ctl['best']:.3f} (needed: >= {CONTROL_ACCURACY})"
            + ("." if ctl["met"] else ", so the recall comparison is not measured."))


def update_report(path: str, section: str) -> None:
    """Write `section` into report.md, replacing an earlier recall section, keeping the rest."""
    text = open(path).read() if os.path.exists(path) else ""
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + section + "\n"
    with open(path, "w") as f:
        f.write(text)
