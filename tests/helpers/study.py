"""What the study's tests share: a run as the executor sees it, without a trainer config."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class FakeRun:
    """The fields the executor and its backends read of a run (study.executor's docstring)."""

    name: str
    workdir: str
    flops_exact: float
    n_params: int = 1000
    steps: int = 10
    config: object = None
