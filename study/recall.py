"""Miniature retrieval: train every architecture on MQAR (linscale_jax.data.mqar) and measure recall.

    python -m study --config=configs/study/recall.py --workdir=DIR
    rows = run_recall(study, workdir)

For each arch × ladder size the trainer trains the ladder model (same model code, same trainer) on
MQAR sequences whose number of key-value pairs is drawn from study.n_pairs (Zoology's mixture
training); the final parameters are then scored on study.eval_sequences fresh test sequences per
number of pairs: accuracy = share of query positions whose argmax prediction is the stored value,
with a 95 % Wilson score interval over the queries (queries of a sequence have distinct keys and
independently drawn values, so they are treated as independent trials).
Writes DIR/recall.csv (arch, d_model, n_pairs, seq_len, accuracy, ci_low, ci_high, plus size,
n_params, state_floats, queries), DIR/recall.png and the "Recall (MQAR)" section of DIR/report.md
(replaced if present, the rest of the file kept). Resumable: finished runs are not retrained.
state_floats is each model's recurrent memory per layer (llama: a KV cache, 2·d per token).
"""

from __future__ import annotations

import csv
import math
import os
import re
import time

import numpy as np

COLUMNS = ("arch", "d_model", "n_pairs", "seq_len", "accuracy", "ci_low", "ci_high", "size", "n_params",
           "state_floats", "queries")
SECTION = "## Recall (MQAR)"


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


def run_config(study, arch: str, size: str):
    """The trainer config of one recall run: the ladder model, MQAR data, the study's schedule."""
    from study.plan import _model_file, load_config_file

    cfg = load_config_file(_model_file(study), f"{arch}-{size}")
    cfg.name = f"recall-{arch}-{size}"
    cfg.data.task = "mqar"
    cfg.data.mqar = dict(n_pairs=str(study.n_pairs), n_keys=int(study.n_keys), n_values=int(study.n_values))
    cfg.data.seed = int(study.seed)
    cfg.train.update(steps=int(study.steps), batch_size=int(study.batch_size), seq_len=int(study.seq_len),
                     log_every=max(1, int(study.steps) // 10), eval_every=0, seed=int(study.seed))
    cfg.optim.update(lr=float(study.lr), warmup_steps=int(study.warmup_steps), schedule="cosine",
                     weight_decay=float(study.weight_decay))
    cfg.checkpoint.update(every_steps=int(study.steps), log_spaced=0, keep=1, async_save=False)
    return cfg


def state_floats(model_cfg, seq_len: int) -> int:
    """Per-layer decoding memory: linear models h·k·e (cosFormer2 k = 2e), llama 2·d·seq_len."""
    h, e, d = model_cfg.n_heads, model_cfg.head_dim, model_cfg.d_model
    if model_cfg.arch == "llama":
        return 2 * d * seq_len
    return h * (2 * e if model_cfg.arch == "cosformer2" or model_cfg.tnl_lrpe else e) * e


def accuracy_counts(cfg, params, study) -> dict[int, tuple[int, int]]:
    """{n_pairs: (correct, queries)} on study.eval_sequences test sequences per n_pairs."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from linscale_jax.data import mqar
    from linscale_jax.models import ModelConfig, build_model

    mc = ModelConfig.from_config(cfg.model)
    graphdef, state, rest = nnx.split(build_model(mc, nnx.Rngs(0)), nnx.Param, ...)
    nnx.replace_by_pure_dict(state, jax.device_get(params))

    @jax.jit
    def hits(state, inputs, targets, weights):
        logits = nnx.merge(graphdef, state, rest)(inputs)
        ok = (jnp.argmax(logits, -1) == targets) & (weights > 0)
        return jnp.sum(ok), jnp.sum(weights > 0)

    out = {}
    n_seq, bs = int(study.eval_sequences), int(study.batch_size)
    for p in (int(x) for x in split_list(study.n_pairs)):
        rng = np.random.default_rng([int(study.seed), mqar.SPLITS["test"], p])
        k = n = 0
        for start in range(0, n_seq, bs):
            b = mqar.batch(rng, min(bs, n_seq - start), int(study.seq_len), p, int(study.n_keys),
                           int(study.n_values))
            c, m = hits(state, b["inputs"], b["targets"], b["weights"])
            k, n = k + int(c), n + int(m)
        out[p] = (k, n)
    return out


def run_recall(study, workdir: str, log=_print) -> list[dict]:
    from linscale_jax.models import accounting
    from linscale_jax.train import loop as trainer
    from linscale_jax.models import ModelConfig

    os.makedirs(workdir, exist_ok=True)
    archs, sizes = split_list(study.archs), split_list(study.sizes)
    rows, t0 = [], time.time()
    for i, (arch, size) in enumerate((a, s) for s in sizes for a in archs):
        cfg = run_config(study, arch, size)
        mc = ModelConfig.from_config(cfg.model)
        log(f"[recall] run {i + 1}/{len(archs) * len(sizes)}: {arch}-{size} ({cfg.train.steps} steps, "
            f"n_pairs {study.n_pairs}, seq_len {study.seq_len}) | elapsed {time.time() - t0:.0f}s")
        summary = trainer.train(cfg, os.path.join(workdir, "runs", f"{arch}-{size}"))
        if summary.get("stopped"):
            raise KeyboardInterrupt(f"recall run {arch}-{size} stopped; re-run to resume")
        counts = accuracy_counts(cfg, summary["params"], study)
        for p, (k, n) in counts.items():
            lo, hi = wilson(k, n)
            rows.append(dict(arch=arch, d_model=mc.d_model, n_pairs=p, seq_len=int(study.seq_len),
                             accuracy=k / max(n, 1), ci_low=lo, ci_high=hi, size=size,
                             n_params=accounting.param_counts(mc)["non_embedding"],
                             state_floats=state_floats(mc, int(study.seq_len)), queries=n))
            log(f"[recall]   {arch}-{size} n_pairs={p}: accuracy {k / max(n, 1):.3f} "
                f"[{lo:.3f}, {hi:.3f}] over {n} queries")
    write_csv(rows, os.path.join(workdir, "recall.csv"))
    plot(rows, os.path.join(workdir, "recall.png"))
    update_report(os.path.join(workdir, "report.md"), report_section(rows, study))
    log(f"[recall] wrote {workdir}/recall.csv, recall.png, report.md in {time.time() - t0:.0f}s")
    return rows


def write_csv(rows: list[dict], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.4f}" if isinstance(r[k], float) else r[k]) for k in COLUMNS})


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = sorted({r["d_model"] for r in rows})
    fig, axes = plt.subplots(1, len(widths), figsize=(4.2 * len(widths), 3.4), squeeze=False, sharey=True)
    for ax, d in zip(axes[0], widths):
        for arch in dict.fromkeys(r["arch"] for r in rows):
            rs = sorted((r for r in rows if r["arch"] == arch and r["d_model"] == d), key=lambda r: r["n_pairs"])
            x = [r["n_pairs"] for r in rs]
            y = np.array([r["accuracy"] for r in rs])
            err = np.array([[r["accuracy"] - r["ci_low"] for r in rs], [r["ci_high"] - r["accuracy"] for r in rs]])
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=arch)
        ax.set_xscale("log", base=2)
        ax.set_title(f"d = {d}")
        ax.set_xlabel("key-value pairs")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("MQAR query accuracy (95% CI)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report_section(rows: list[dict], study) -> str:
    archs = list(dict.fromkeys(r["arch"] for r in rows))
    lines = [SECTION, "",
             f"Multi-query associative recall (Arora et al. 2023, Zoology): each architecture's ladder model "
             f"trained with the same trainer on {study.steps} steps × {study.batch_size} MQAR sequences of "
             f"{study.seq_len} tokens (key-value pairs drawn from {{{study.n_pairs}}}, {study.n_keys} keys, "
             f"{study.n_values} values), scored on {study.eval_sequences} test sequences per number of pairs. "
             "Accuracy over query positions with 95 % Wilson intervals. Chance is 1/"
             f"{study.n_values}.", "", "![MQAR accuracy](recall.png)", "",
             "| d | pairs | " + " | ".join(archs) + " |", "|---|---|" + "---|" * len(archs)]
    keys = sorted({(r["d_model"], r["n_pairs"]) for r in rows})
    for d, p in keys:
        cells = []
        for a in archs:
            r = next((r for r in rows if r["arch"] == a and r["d_model"] == d and r["n_pairs"] == p), None)
            cells.append("–" if r is None else f"{r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]")
        lines.append(f"| {d} | {p} | " + " | ".join(cells) + " |")
    lines += ["", verdict(rows), ""]
    return "\n".join(lines)


def verdict(rows: list[dict]) -> str:
    """Does llama lead? Per (d, pairs): llama's interval above every linear model's, overlapping, or below."""
    lead = tie = behind = 0
    for d, p in sorted({(r["d_model"], r["n_pairs"]) for r in rows}):
        cell = {r["arch"]: r for r in rows if r["d_model"] == d and r["n_pairs"] == p}
        if "llama" not in cell or len(cell) < 2:
            continue
        ll = cell["llama"]
        others = [r for a, r in cell.items() if a != "llama"]
        if all(ll["ci_low"] > r["ci_high"] for r in others):
            lead += 1
        elif any(r["ci_low"] > ll["ci_high"] for r in others):
            behind += 1
        else:
            tie += 1
    total = lead + tie + behind
    if not total:
        return "No llama row to compare with."
    return (f"Does LLaMA lead on retrieval? Its 95 % interval lies above every linear model's in {lead} "
            f"of {total} (width, pairs) cells; it overlaps at least one linear model's in {tie}; a linear "
            f"model's lies above LLaMA's in {behind}.")


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
