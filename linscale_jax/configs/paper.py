"""The paper's configurations (24 + the 1B aspect-ratio variants), for TPU pods.

    python -m linscale_jax.train --config=paper:<arch>-<size> --workdir=gs://BUCKET/DIR
arch: llama | tnl | hgrn2 | cosformer2; size: 70m 160m 410m 1b 3b 7b (notes §3), or a 1B variant
named by width and depth: 1b-d1792l24, 1b-d2048l18, 1b-d3072l8 (1b itself is d1536 l32).
Training settings of the paper (notes §4): sequence 8192, batch 480 sequences, lr 3e-4, weight
decay 0.1, cl100k_base vocabulary padded to 100,280. Cost: 300B tokens a run; the PF-days of each:
`python -m linscale_jax.study --config=paper --workdir=DIR --dry_run`.
"""

import math

from linscale_jax.config import base_config
from linscale_jax.models import sizes

TOKENS = 300e9


def get_config(arg: str = "tnl-410m"):
    arch, size = sizes.parse_name(arg)
    c = base_config()
    c.name = arg
    sizes.apply_model(c.model, sizes.paper_model(arch, size))
    c.train.seq_len = 8192
    c.train.batch_size = 480
    c.train.steps = math.ceil(TOKENS / (c.train.seq_len * c.train.batch_size))
    c.optim.lr = 3e-4
    c.optim.weight_decay = 0.1
    c.data.vocab = "cl100k_base"
    return c


def names():
    """All paper config names (24 main + the aspect-ratio variants)."""
    from linscale_jax.models import registry

    all_sizes = list(sizes.PAPER_SIZES) + list(sizes.ASPECT_VARIANTS)
    return [f"{a}-{s}" for a in registry.paper_archs() for s in all_sizes]
