"""Tiny runs on the embedded stdlib corpus: a ladder model, 400 steps of 16 x 128 byte tokens.

  python -m linscale_jax.train --config=tiny --workdir=/tmp/run            # tnl-d64
  python -m linscale_jax.train --config=tiny:llama --workdir=/tmp/run      # llama-d64
  python -m linscale_jax.train --config=tiny:hgrn2-d128 --workdir=/tmp/run
Argument: <arch> or <arch>-<size>, a ladder size (configs/ladder.py). Peak lr 3e-3, cosine decay.
Cost: docs/results.md, "What the configs cost".
"""

from __future__ import annotations

from linscale_jax.config import base_config
from linscale_jax.models import sizes

DEFAULT_ARCH, DEFAULT_SIZE = "tnl", "d64"


def get_config(arg: str | None = None):
    arch, _, size = (arg or DEFAULT_ARCH).partition("-")
    arch, size = sizes.parse_name(f"{arch}-{size or DEFAULT_SIZE}")
    c = base_config()
    c.name = f"tiny-{arch}-{size}"
    sizes.apply_model(c.model, sizes.ladder_model(arch, size))
    c.data.vocab = "byte"
    c.train.update(steps=400, batch_size=16, seq_len=128, log_every=10, eval_every=100,
                   eval_batches=2)
    c.optim.update(lr=3e-3, warmup_steps=20, schedule="cosine")
    c.checkpoint.update(every_steps=100, log_spaced=4)
    return c
