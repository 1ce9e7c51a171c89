"""A miniature study preset, and its command line, for the tests that run `python -m
linscale_jax.study` in subprocesses: the quick preset with tnl at d32, d48 and d64 of one layer,
24 steps of 8 x 128 tokens each, val_loss at its 5 checkpoints (steps 1, 3, 8, 16, 24), NIAH and the
probe at their smallest on d64, no replicate seed.

    preset = write_preset(tmp_path, workers=2)       # the preset file (keyword: study fields)
    cmd = study_cmd(preset, workdir, "--backend=ray") # [python, -m, linscale_jax.study, ...]
    recall_csv(R, tnl="nan")                         # R/recall.csv of a recall study (llama passes)
    FakeRun("tnl-d32", workdir, flops_exact=1e9)      # a run as the executor sees it
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRESET = '''from linscale_jax.study.presets import preset
import ml_collections


def get_config():
    s = preset("quick")
    s.update(dict(archs="tnl", sizes="d32,d48,d64", tokens=24 * 8 * 128.0, checkpoints=3,
                  estimators="val_loss"))
    s.overrides.model = ml_collections.ConfigDict(dict(n_layers=1))
    s.overrides.optim.warmup_steps = 4
    s.replicates.seeds = 0
    s.eval.update(niah_grid="1x1", probe_items=4)
    s.fit.bootstrap = 8
    s.update(json.loads({changes!r}))
    return s
'''


def write_preset(directory, **changes) -> str:
    """The mini preset as a file in `directory` (its path); `changes` replace study fields."""
    path = Path(directory) / "mini_study.py"
    path.write_text("import json\n" + PRESET.format(changes=json.dumps(changes)))
    return str(path)


def study_cmd(preset: str, workdir, *flags) -> list[str]:
    return [sys.executable, "-m", "linscale_jax.study", f"--config={preset}", f"--workdir={workdir}", *flags]


def env(**changes) -> dict:
    """This process's environment for a study subprocess, with `changes` (None: removed)."""
    e = dict(os.environ, PYTHONPATH=str(ROOT))
    for k, v in changes.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


RECALL_COLUMNS = ("arch", "d_model", "n_pairs", "seq_len", "accuracy", "ci_low", "ci_high", "state_floats",
                  "seed", "status", "head_dim", "n_layers", "lr", "steps", "test_loss", "queries", "n_params",
                  "variant", "usable_state_floats", "max_steps")


def recall_csv(directory, tnl="0.30", truncate=False, **column) -> Path:
    """DIR/recall.csv of a recall study: llama (the positive control, 0.97), tnl (`tnl`) and hgrn2
    (0.40) at d 32 with 4 pairs, a seed-0 row and a seed "all" row each (rows 2-7 of the file);
    `column` replaces a value of tnl's rows; truncate cuts the last row short."""
    rows = []
    for arch, acc in (("llama", "0.97"), ("tnl", tnl), ("hgrn2", "0.40")):
        for seed in ("0", "all"):
            r = dict(arch=arch, d_model=32, n_pairs=4, seq_len=64, accuracy=acc, ci_low=0.3, ci_high=0.99,
                     state_floats=512, seed=seed, status="recall", head_dim=8, n_layers=2, lr=0.001,
                     steps=1000, test_loss=0.1, queries=512, n_params=30000, variant="",
                     usable_state_floats=512, max_steps=1000)
            rows.append(dict(r, **column) if arch == "tnl" else r)
    text = ",".join(RECALL_COLUMNS) + "\n" + "".join(",".join(str(r[c]) for c in RECALL_COLUMNS) + "\n"
                                                    for r in rows)
    if truncate:
        text = text[:-40]
    path = Path(directory) / "recall.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@dataclasses.dataclass
class FakeRun:
    """The fields the executor and its backends read of a run (study.executor's docstring)."""

    name: str
    workdir: str
    flops_exact: float
    n_params: int = 1000
    steps: int = 10
    config: object = None
