"""The scaling report's own figures, drawn from the study's files in each arch's colour
(linscale_jax.palette); fit/ draws the laws' figures (fit.plots).

    loss_vs_compute(table, envelope_csv, fits, path)   # every run, each arch's envelope and fitted L(C)
    loss_vs_step(table_csv, runs, path, cooldown_csv, warmup)   # every run's validation loss per step
"""

from __future__ import annotations

import csv
import os

import numpy as np

from linscale_jax import palette


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def loss_vs_compute(table, envelope_csv: str, fits: dict, path: str) -> None:
    """Every arch's runs, its envelope (fit/envelope.csv, the laws' estimator) and its fitted L(C)."""
    plt = _pyplot()
    env = list(csv.DictReader(open(envelope_csv))) if os.path.exists(envelope_csv) else []
    first = env[0]["estimator"] if env else None
    fig, ax = plt.subplots(figsize=(8, 5))
    for arch in table.archs:
        col, sub = palette.color(arch), table.select(arch)
        for _, r in sub.runs():
            ax.plot(r.flops, r.loss, color=col, lw=0.6, alpha=0.35)
        pts = [r for r in env if r["arch"] == arch and r["estimator"] == first]
        if pts:
            ax.plot([float(r["compute"]) for r in pts], [float(r["loss"]) for r in pts], color=col, lw=2,
                    ls=palette.linestyle(arch), label=f"{arch} envelope")
        if arch in fits:
            span = np.geomspace(sub.flops.min(), sub.flops.max(), 50)
            law = fits[arch]["L_C"]
            ax.plot(span, law["coefficient"] * span ** law["exponent"], "--", color=col, lw=1.2,
                    label=f"{arch} L = {law['coefficient']:.3g}·C^{law['exponent']:+.3f}")
    ax.set(xscale="log", yscale="log", xlabel="compute C (PF-days, Table-1 accounting)",
           ylabel="validation loss (nats/byte-token)", title="loss vs compute: runs, envelopes, fitted laws")
    if ax.get_legend_handles_labels()[0]:  # no envelope nor law (a study too small to fit): no legend
        ax.legend(fontsize=7, loc="upper right")  # "best" searches every point: slow
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def loss_vs_step(table_csv: str, runs: list[dict], path: str, cooldown_csv: str | None = None,
                 warmup: int = 0) -> None:
    """One panel per size (the ladder's names, in the order of `runs`), every arch's runs in its
    colour: validation loss at every checkpoint of DIR/table.csv against the step (replicate seeds
    thinner), the cooled-down branches' losses (fit/table_cooldown.csv) as crosses at their steps,
    and the first step the laws use (the end of the longest learning-rate warmup) as a grey line.
    `runs`: findings.json's runs (name, arch, size, seed)."""
    plt = _pyplot()
    by_run: dict[str, list[tuple[int, float]]] = {}
    for r in csv.DictReader(open(table_csv)):
        if r.get("loss") not in (None, ""):
            by_run.setdefault(r["run"], []).append((int(r["step"]), float(r["loss"])))
    cool: dict[str, list[tuple[int, float]]] = {}
    if cooldown_csv and os.path.exists(cooldown_csv):
        for r in csv.DictReader(open(cooldown_csv)):
            cool.setdefault(r["run"], []).append((int(r["step"]), float(r["loss"])))
    from matplotlib.ticker import NullFormatter

    sizes = list(dict.fromkeys(r["size"] for r in runs))
    cols = min(3, len(sizes))
    rows = -(-len(sizes) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.4 * rows), squeeze=False, sharey=True)
    for ax, size in zip(axes.flat, sizes):
        for r in (r for r in runs if r["size"] == size):
            pts = sorted(by_run.get(r["name"], []))
            if not pts:
                continue
            col = palette.color(r["arch"])
            ax.plot(*zip(*pts), color=col, ls=palette.linestyle(r["arch"]), lw=0.8 if r["seed"] else 1.4,
                    alpha=0.6 if r["seed"] else 1.0, label=r["arch"] + (f" seed {r['seed']}" if r["seed"] else ""))
            if r["name"] in cool:
                ax.plot(*zip(*sorted(cool[r["name"]])), "x", color=col, ms=4)
        if warmup:
            ax.axvline(warmup, color=palette.OTHER, lw=0.8, ls=":")
        ax.set(xscale="log", xlabel="step", title=size)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper right")
    for ax in axes[:, 0]:
        ax.set_ylabel("validation loss (nats/token)")
    for ax in list(axes.flat)[len(sizes):]:
        ax.axis("off")
    fig.suptitle("every run's validation loss per checkpoint (x: cooled-down branches; dotted: the first step "
                 "the laws use)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
