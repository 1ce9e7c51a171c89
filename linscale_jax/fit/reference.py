"""Published scaling-law data shipped with `fit` (linscale_jax/fit/data/*.csv).

Each CSV has a `<name>.source.md` beside it: where the numbers come from, their licence, the
columns and their units. The notebook and tests/fit/test_fit_real.py reproduce published fits from
them; nothing here is read from outside the package.
"""

import importlib.resources
from pathlib import Path

DATA_DIR = importlib.resources.files("linscale_jax.fit").joinpath("data")  # package data


def path(name: str) -> Path:
    """The shipped file `name` (e.g. "chinchilla_fig4_epoch.csv"); FileNotFoundError names the ones there are."""
    p = DATA_DIR / name
    if not p.is_file():
        have = ", ".join(sorted(q.name for q in DATA_DIR.iterdir() if q.name.endswith(".csv")))
        raise FileNotFoundError(f"no reference file {name!r} in {DATA_DIR} (shipped: {have})")
    return p
