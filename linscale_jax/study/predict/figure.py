"""P/prediction.png: per arch, the law's loss across the ladder's shape at the predicted compute, the
three rungs' predictions with their 95% intervals, and the measured losses.

    plot(fc, rows, path)     # fc: forecast.forecast's dict; rows: outcome.rows_of
"""

from __future__ import annotations


def plot(fc: dict, rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from linscale_jax import palette

    archs = list(fc["archs"])
    fig, axes = plt.subplots(1, max(len(archs), 1), figsize=(4.2 * max(len(archs), 1), 3.8), squeeze=False)
    for ax, a in zip(axes[0], archs):
        p, col = fc["archs"][a], palette.color(a)
        fam = p["family"]
        ax.plot([f["n_params"] for f in fam], [f["predicted"] for f in fam], color=col, lw=1.2, label="law at C")
        mine = [r for r in rows if r["arch"] == a]
        for r in mine:
            n = r["n_params"]
            if r["ci_low"] is not None:
                ax.plot([n, n], [r["ci_low"], r["ci_high"]], color=col, lw=3, alpha=0.35)
            ax.plot(n, r["predicted"], "o", ms=6, mfc="white", mec=col, label=None)
            if r["actual"] is not None:
                ax.plot(n, r["actual"], "o" if not r["predicted_optimum"] else "*", ms=7 if not r["predicted_optimum"]
                        else 11, color=col, mec="k", mew=0.4)
        opt = next(r for r in mine if r["predicted_optimum"])
        ax.axvline(opt["n_params"], color=palette.OTHER, lw=0.8, ls="--")
        ns = [r["n_params"] for r in mine]
        ax.set_xlim(min(ns) / 1.6, max(ns) * 1.6)
        ys = [y for r in mine for y in (r["ci_low"], r["ci_high"], r["actual"], r["predicted"]) if y is not None]
        pad = 0.15 * (max(ys) - min(ys) + 1e-3)
        ax.set_ylim(min(ys) - pad, max(ys) + pad)
        ax.set(xscale="log", xlabel="N (non-embedding)", ylabel="loss",
               title=f"{a}: N_opt {opt['size']} (dashed)\nopen: predicted ±95%, filled: actual (★ N_opt)")
        ax.title.set_fontsize(9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
