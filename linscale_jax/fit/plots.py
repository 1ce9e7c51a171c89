"""PNG figures of the fits (matplotlib, Agg backend).

    curves.png         loss vs compute for every run, one panel per arch side by side, with the
                       envelope (approach 1), the budget optima (approach 2) or the model's
                       predictions (approach 3), and the fitted L(C)
    allocation.png     N_opt(C) and D_opt(C): the optimal points and the fitted laws, all archs
    isoflop.png        (approach 2) every IsoFLOP profile with its parabola, one panel per arch
    paper_overlay.png  the fitted laws (solid) over the paper's Table 3 laws (dashed), C in PF-days
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from linscale_jax import palette  # noqa: E402
from linscale_jax.fit import approach1, approach2, approach3, paper  # noqa: E402
from linscale_jax.fit.table import PF_DAY, Table, compute_scale  # noqa: E402

LABELS = {"L_C": "loss L", "N_opt_C": "N_opt (non-embedding params)", "D_opt_C": "D_opt (tokens)"}


def _save(fig, path: Path) -> None:
    # Fixed margins: tight_layout measures every tick label of the log axes and costs seconds.
    w = fig.get_figwidth()
    fig.subplots_adjust(left=1.0 / w, right=1 - 0.15 / w, bottom=0.13, top=0.88, wspace=0.25)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _xlabel(unit: str) -> str:
    return "compute C (PF-days)" if unit == "pf-days" else "compute C (FLOPs)"


def _span(table: Table) -> np.ndarray:
    return np.geomspace(table.flops.min(), table.flops.max(), 100)


def _optimal_points(result):
    """(C, N_opt, D_opt, L_opt, used-mask) of the points behind a result's laws."""
    if isinstance(result, approach1.Result):
        e = result.envelope
        used = e.clamped == 0 if result.excluded["applied"] else np.ones(len(e.compute), bool)
        return e.compute, e.n_params, e.tokens, e.loss, used
    if isinstance(result, approach2.Result):
        b = [x for x in result.budgets if x.status == "ok"]
        arr = [np.array([getattr(x, f) for x in b]) for f in ("compute", "n_opt", "d_opt", "l_opt")]
        return (*arr, np.ones(len(b), bool))
    return None


def plot_curves(path: Path, tables: dict[str, Table], results: dict, unit: str) -> None:
    archs = list(results)
    fig, axes = plt.subplots(1, len(archs), figsize=(5 * len(archs), 4), squeeze=False)
    for ax, arch in zip(axes[0], archs):
        table, result = tables[arch], results[arch]
        runs = table.runs()
        tints = palette.shades(arch, len(runs))  # the arch's colour, light (smallest) to full
        for i, (name, run) in enumerate(runs):
            c = tints[i]
            ax.plot(run.flops, run.loss, color=c, lw=1, alpha=0.8,
                    marker="." if len(run) < 3 else "",  # single-checkpoint runs: a dot
                    label=f"N={run.n_params[0]:.3g}" if len(runs) <= 12 else None)
            if isinstance(result, approach3.Result):
                pred = result.predict(run.n_params, run.tokens)
                ax.plot(run.flops, pred, color=c, lw=0.8, ls=":")
        pts = _optimal_points(result)
        if pts is not None:
            comp, _, _, loss, used = pts
            if isinstance(result, approach1.Result):
                ax.plot(comp, loss, color="k", lw=1.5, label="envelope")
                for r in result.excluded["ranges"]:
                    ax.axvspan(*r["compute"], color="0.85", zorder=0)
            else:
                ax.plot(comp, loss, "ks", ms=4, label="IsoFLOP optima")
        span = _span(table)
        ax.plot(span, result.laws["L_C"](span), "--", color=palette.color(arch), lw=1.5,
                label=f"L(C) = {result.laws['L_C']}")
        ax.set(xscale="log", yscale="log", xlabel=_xlabel(unit), ylabel="loss", title=arch)
        ax.legend(fontsize=6)
    _save(fig, path)


def plot_allocation(path: Path, tables: dict[str, Table], results: dict, unit: str) -> None:
    """N_opt(C) and D_opt(C): the optimal points (filled: an interior size won; hollow: a clamped
    point kept as a bound; grey: excluded) and the fitted laws, an arch's colour each."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for arch, result in results.items():
        pts = _optimal_points(result)
        span = _span(tables[arch])
        c = palette.color(arch)
        bound = (result.envelope.clamped != 0 if isinstance(result, approach1.Result)
                 else np.zeros(len(pts[0]), bool) if pts is not None else None)
        for ax, key, col in ((axes[0], "N_opt_C", 1), (axes[1], "D_opt_C", 2)):
            if pts is not None:
                used = pts[4]
                ax.plot(pts[0][used & ~bound], pts[col][used & ~bound], ".", color=c, ms=4)
                ax.plot(pts[0][used & bound], pts[col][used & bound], "o", color=c, mfc="none", ms=3, mew=0.6)
                ax.plot(pts[0][~used], pts[col][~used], ".", color="0.7", ms=2)
            share = result.bound_share() if isinstance(result, approach1.Result) else 0.0
            ax.plot(span, result.laws[key](span), color=c, ls=":" if share > approach1.MOSTLY_BOUNDS else "-",
                    label=f"{arch}: {result.laws[key]}" + (f" (a bound: {share:.0%} clamped)"
                                                          if share > approach1.MOSTLY_BOUNDS else ""))
    for ax, key in zip(axes, ("N_opt_C", "D_opt_C")):
        ax.set(xscale="log", yscale="log", xlabel=_xlabel(unit), ylabel=LABELS[key])
        ax.legend(fontsize=7)
    fig.suptitle("compute-optimal allocation (filled: interior optimum; hollow: a bound kept; grey: excluded)")
    _save(fig, path)


def plot_isoflop(path: Path, results: dict) -> None:
    archs = list(results)
    fig, axes = plt.subplots(1, len(archs), figsize=(5 * len(archs), 4), squeeze=False)
    for ax, arch in zip(axes[0], archs):
        budgets = results[arch].budgets
        for j, b in enumerate(budgets):
            c = plt.get_cmap("plasma")(j / max(len(budgets) - 1, 1))
            ax.plot(b.n, b.loss, "o", color=c, ms=3, mfc="none" if b.status != "ok" else c)
            if b.parabola is not None:
                lo, hi = b.window
                x = np.linspace(np.log(b.n[lo]), np.log(b.n[hi - 1]), 50)
                c0, c1, c2 = b.parabola
                ax.plot(np.exp(x), c0 + c1 * x + c2 * x**2, color=c, lw=1)
            if b.status == "ok":
                ax.plot(b.n_opt, b.l_opt, "k*", ms=6)
        ax.set(xscale="log", xlabel="N (non-embedding params)", ylabel="loss",
               title=f"{arch}: IsoFLOP profiles (hollow: dropped)")
    _save(fig, path)


def plot_paper_overlay(path: Path, tables: dict[str, Table], results: dict, unit: str) -> None:
    """Ours (solid, over our compute range) and Table 3 (dashed, 1e-3..1e3 PF-days), an arch's
    colour for both. An N_opt(C) or D_opt(C) law fitted mostly to bounds (approach1.MOSTLY_BOUNDS)
    is drawn dotted and labelled a bound: it is not a measured optimum to set beside the paper's."""
    to_pf = compute_scale(unit) / PF_DAY  # C_pf = C_unit * to_pf
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    paper_span = np.geomspace(1e-3, 1e3, 50)
    for ax, key in zip(axes, ("L_C", "N_opt_C", "D_opt_C")):
        for arch in paper.ARCHS:
            ax.plot(paper_span, paper.law(arch, key)(paper_span), "--", color=palette.color(arch), lw=1,
                    label=f"paper {arch}")
        for arch, result in results.items():
            span = _span(tables[arch])
            share = result.bound_share() if isinstance(result, approach1.Result) else 0.0
            bound = key != "L_C" and share > approach1.MOSTLY_BOUNDS
            ax.plot(span * to_pf, result.laws[key](span), ":" if bound else "-", color=palette.color(arch),
                    lw=1.5 if bound else 2,
                    label=f"ours {arch}" + (f" (a bound: {share:.0%} of its points clamped)" if bound else ""))
        ax.set(xscale="log", yscale="log", xlabel="compute C (PF-days)", ylabel=LABELS[key])
        ax.legend(fontsize=6)
    fig.suptitle("fitted laws (solid; dotted: a bound) vs the paper's Table 3 (dashed)")
    _save(fig, path)


def write_all(out: Path, tables: dict[str, Table], results: dict, unit: str) -> list[Path]:
    """Write every figure for ``results`` (arch -> approach Result) into ``out``; returns paths."""
    paths = [out / "curves.png", out / "allocation.png", out / "paper_overlay.png"]
    plot_curves(paths[0], tables, results, unit)
    plot_allocation(paths[1], tables, results, unit)
    plot_paper_overlay(paths[2], tables, results, unit)
    if all(isinstance(r, approach2.Result) for r in results.values()):
        paths.append(out / "isoflop.png")
        plot_isoflop(paths[-1], results)
    return paths
