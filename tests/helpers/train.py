"""Tiny trainer configurations shared by the tests, the flags that give them on a command line, and a
workdir's byte snapshot."""

import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "configs"))

import tiny  # noqa: E402


def tiny_config(arch="llama", steps=6, **train):
    """1-layer d64 ladder model, 4 x 32 tokens per step, constant lr, no eval, sync checkpoints."""
    c = tiny.get_config(f"{arch}-d64")
    c.model.update(n_layers=1, chunk_size=16)
    c.train.update(dict(dict(steps=steps, batch_size=4, seq_len=32, eval_every=0, log_every=1,
                             peak_flops=1e12), **train))
    c.optim.update(lr=1e-2, warmup_steps=0, schedule="constant")
    c.checkpoint.update(every_steps=0, log_spaced=0, async_save=False)
    return c


def cli_overrides(c):
    """Command-line flags reproducing tiny_config's changes to configs/tiny.py:<arch>-d64 (an
    arch's options section, model.<arch>, field by field)."""
    flags = []

    def add(prefix, section):
        for k, v in section.items():
            if hasattr(v, "items"):
                add(f"{prefix}.{k}", v)
            else:
                flags.append(f"--config.{prefix}.{k}={v}")

    for section in ("model", "train", "optim", "checkpoint"):
        add(section, c[section])
    return flags


def snapshot(workdir):
    """{relative path: sha256} of every file (the byte-identity of a refused command)."""
    return {str(p.relative_to(workdir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(workdir.rglob("*")) if p.is_file()}
