"""One colour per architecture in every figure (the scaling report, fit's plots, the paper overlay,
the held-out check, recall and tuning), so an arch reads the same everywhere.

    palette.color("tnl")                   # '#ff7f0e'; a variant label ("tnl+short_conv=4") gets its arch's
    palette.linestyle("tnl+short_conv=4")  # '--': the paper's mixer solid, a variant dashed
    palette.shades("tnl", 5)               # 5 colours, light to full: the sizes of one arch, smallest first

The paper's four archs have fixed colours (matplotlib's tab10 in Table 1's order), as do the
project's archs beyond the paper (BEYOND); any other arch takes one picked by its name's checksum,
so its colour never depends on which archs a figure shows. The module imports nothing of the
project, so fit's figures can use it.
Grey and black are kept for what is not an arch (other runs, envelopes, chance lines).
"""

from __future__ import annotations

import zlib

PAPER = {"llama": "#1f77b4", "tnl": "#ff7f0e", "hgrn2": "#2ca02c", "cosformer2": "#d62728"}
BEYOND = {"gdn": "#9467bd"}
MORE = ("#8c564b", "#e377c2", "#bcbd22", "#17becf", "#393b79", "#637939", "#843c39")
OTHER = "0.65"  # runs that are not the figure's subject


def arch_of(label: str) -> str:
    """The arch of a study label: 'cosformer2+tpe=none' -> 'cosformer2'."""
    return str(label).split("+", 1)[0]


def color(label: str) -> str:
    """The hex colour of an arch or a variant label of it (module docstring)."""
    a = arch_of(label)
    if a in PAPER or a in BEYOND:
        return PAPER.get(a) or BEYOND[a]
    return MORE[zlib.crc32(a.encode()) % len(MORE)]


def linestyle(label: str) -> str:
    """'-' for an arch, '--' for a variant of it (a label with '+')."""
    return "--" if "+" in str(label) else "-"


def shades(label: str, n: int) -> list[tuple[float, float, float]]:
    """n RGB colours from a light tint of the arch's colour to the colour itself (n = 1: the colour)."""
    h = color(label).lstrip("#")
    rgb = [int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    if n <= 1:
        return [tuple(rgb)] * max(n, 0)
    out = []
    for i in range(n):
        w = 0.35 + 0.65 * i / (n - 1)  # share of the full colour; the rest white
        out.append(tuple(w * c + (1 - w) for c in rgb))
    return out
