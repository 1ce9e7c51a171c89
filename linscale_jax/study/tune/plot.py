"""The tuning grid's plot: loss against learning rate, one panel per (arch, size), one line per
(batch, β2), each size's lr* (the vertex) marked.

    png = plot_lr(rows, fitted, "DIR/tune/lr.png")     # rows: study.tune.cell_rows
"""

from __future__ import annotations

import math


def plot_lr(rows: list[dict], fitted: dict, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for r in rows:
        if (r["arch"], r["size"]) not in panels:
            panels.append((r["arch"], r["size"]))
    cols = min(5, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.8 * nrows), squeeze=False, sharey="row")
    finite = [r["loss"] for r in rows if isinstance(r["loss"], float)]
    combos = sorted({(r["batch"], r["beta2"]) for r in rows})
    color = {k: plt.get_cmap("tab10")(i % 10) for i, k in enumerate(combos)}  # one per (batch, β2)
    for ax, (arch, size) in zip(axes.flat, panels):
        mine = [r for r in rows if (r["arch"], r["size"]) == (arch, size) and r["seed"] == 0]
        lines = sorted({(r["batch"], r["beta2"]) for r in mine})
        for batch, beta2 in lines:
            pts = sorted((r["lr"], r["loss"]) for r in mine
                         if (r["batch"], r["beta2"]) == (batch, beta2) and isinstance(r["loss"], float))
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, lw=1, color=color[(batch, beta2)],
                        label=f"batch {batch}, β2 {beta2:g}")
        div = [r["lr"] for r in mine if not isinstance(r["loss"], float)]
        if div and finite:
            ax.plot(div, [max(finite)] * len(div), "x", color="k", label="diverged")
        best = [r for r in mine if r["best"]]
        if best:
            ax.plot([best[0]["lr"]], [best[0]["loss"]], "*", color="k", ms=9)
        opt = fitted.get(arch, {}).get("optima", {}).get(size)
        if opt is not None:
            ax.axvline(fitted[arch]["lr"]["values"][fitted[arch]["sizes"].index(size)], color="grey", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        lrs = sorted({r["lr"] for r in mine})
        ax.set_xticks(lrs, [f"{x:g}" for x in lrs], rotation=45)
        ax.minorticks_off()
        ax.set_title(f"{arch} {size} (N={mine[0]['n_params']:.3g})" if mine else f"{arch} {size}", fontsize=9)
        ax.set_xlabel("peak learning rate", fontsize=8)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6)
    for ax in axes[:, 0]:
        ax.set_ylabel("loss after cooldown (nats/byte)", fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
