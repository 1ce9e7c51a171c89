"""One colour per arch in every figure: fit's curves, allocation and paper overlay, the scaling
report's loss-vs-compute and loss-vs-step, the held-out check, recall and tuning. Each figure is
drawn from small planted inputs; every coloured line, band or marker that belongs to an arch (by
its label, else its panel's title) has that arch's hue in linscale_jax.palette (a lighter shade of
it allowed: a size), and every arch drawn has at least one such artist. About 10 s on 2 cores."""

import colorsys
import csv
import re

import matplotlib
import numpy as np
import pytest
from matplotlib.colors import to_rgb

from linscale_jax import palette

matplotlib.use("Agg")
ARCHS = ("llama", "tnl", "hgrn2", "cosformer2")
SIZES = (1e5, 3e5, 1e6, 3e6, 1e7)


def _hue(c):
    h, s, v = colorsys.rgb_to_hsv(*to_rgb(c))
    return None if s < 0.15 or v < 0.15 else h  # grey, black, white: not an arch's colour


def _arch_of(text: str):
    found = [a for a in ARCHS if re.search(rf"(^|[\s(]){a}($|[\s:+,)])", text or "")]
    return found[0] if len(found) == 1 else None


def _artists(fig):
    """(arch, colour) of every labelled line, errorbar and band, the arch from the label or the
    panel's title."""
    out = []
    for ax in fig.axes:
        title_arch = _arch_of(ax.get_title().split(":")[0].split(" (")[0])
        items = [(line.get_label(), line.get_color()) for line in ax.get_lines()]
        items += [(c.get_label(), c.lines[0].get_color()) for c in ax.containers if hasattr(c, "lines")]
        items += [(p.get_label(), p.get_facecolor()[0][:3]) for p in ax.collections if len(p.get_facecolor())]
        for label, colour in items:
            arch = _arch_of(label if not str(label).startswith("_") else "") or title_arch
            if arch:
                out.append((arch, colour))
    return out


@pytest.fixture
def figures(monkeypatch):
    """Every figure saved while the test runs."""
    from matplotlib.figure import Figure

    saved, original = [], Figure.savefig

    def keep(self, *a, **k):
        saved.append(self)
        return original(self, *a, **k)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def _check(fig, expect=ARCHS):
    seen = {}
    for arch, colour in _artists(fig):
        h = _hue(colour)
        if h is not None:
            assert h == pytest.approx(_hue(palette.color(arch)), abs=0.01), (fig.axes[0].get_title(), arch, colour)
            seen[arch] = seen.get(arch, 0) + 1
    assert set(seen) == set(expect), (fig.axes[0].get_title(), seen)


def _table():
    from linscale_jax.fit import synthetic
    from linscale_jax.fit.table import COLUMNS, from_columns

    tabs = [synthetic.planted_table(synthetic.Law(E=1.8 + 0.05 * i), arch=a, sizes=SIZES, points_per_run=8, seed=i)
            for i, a in enumerate(ARCHS)]
    return from_columns("planted", **{c: np.concatenate([getattr(t, c) for t in tabs]) for c in COLUMNS})


def test_palette_is_fixed_per_arch_and_variant():
    colours = [palette.color(a) for a in ARCHS]
    assert len(set(colours)) == 4 and palette.color("tnl+short_conv=4") == palette.color("tnl")
    assert palette.linestyle("tnl+short_conv=4") == "--" and palette.linestyle("tnl") == "-"
    assert palette.color("some_new_arch") == palette.color("some_new_arch") not in colours
    from linscale_jax.models import registry

    registered = [palette.color(a) for a in registry.ARCHS]  # every registered arch its own colour
    assert len(set(registered)) == len(registry.ARCHS), dict(zip(registry.ARCHS, registered))
    tints = palette.shades("hgrn2", 4)
    assert tints[-1] == pytest.approx(to_rgb(palette.color("hgrn2")))
    assert len({_hue(t) for t in tints}) == 1 and tints[0] != tints[-1]


def test_every_figure_draws_an_arch_in_its_colour(figures, tmp_path):
    from linscale_jax.fit import FitOptions, fit_table, holdout
    from linscale_jax.study.recall import report as recall_report
    from linscale_jax.study.scaling.report import figures as report_figures
    from linscale_jax.study.tune import plot as tune_plot

    table = _table()
    result = fit_table(table, FitOptions(approach=1, bootstrap=0, include_clamped=True))
    result.write(tmp_path / "fit")  # curves, allocation, paper overlay
    fits = {a: {k: dict(coefficient=law.coefficient, exponent=law.exponent) for k, law in r.laws.items()}
            for a, r in result.results.items()}
    report_figures.loss_vs_compute(table, str(tmp_path / "none.csv"), fits, str(tmp_path / "lc.png"))
    with open(tmp_path / "table.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("run", "step", "loss"))
        w.writerows(zip(table.run, table.step.astype(int), table.loss))
    runs = [dict(name=n, arch=n.split("-")[0], size=n.split("-", 1)[1], seed=0) for n in dict.fromkeys(table.run)]
    report_figures.loss_vs_step(str(tmp_path / "table.csv"), runs, str(tmp_path / "ls.png"))
    preds = [p for a in ARCHS for p in holdout.predict(table.select(a), n_boot=8, seed=0)]
    holdout.write_curves_csv(preds, tmp_path / "curves.csv")
    holdout.plot(tmp_path / "curves.csv", table, tmp_path / "holdout.png")
    rows = [dict(seed="all", n_pairs=p, arch=a, state_floats=s, usable_state_floats=s, accuracy=0.5, ci_low=0.4,
                 ci_high=0.6, status="recall") for a in ("llama", "tnl", "tnl+short_conv=4", "hgrn2", "cosformer2")
            for p in (4, 8) for s in (64, 256)]
    recall_report.plot(rows, type("Study", (), {"n_values": 64})(), str(tmp_path / "recall.png"))
    cells = [dict(arch=a, size=s, n_params=1e4, seed=0, batch=b, beta2=0.99, lr=lr, loss=2.0 + lr, best=0)
             for a in ARCHS for s in ("d16", "d32") for b in (2, 8) for lr in (1e-3, 2e-3, 4e-3)]
    tune_plot.plot_lr(cells, {}, str(tmp_path / "tune.png"))
    names = ["curves", "allocation", "paper_overlay", "loss_vs_compute", "loss_vs_step", "holdout", "recall", "tune"]
    assert len(figures) == len(names)
    for name, fig in zip(names, figures):
        _check(fig)
