"""The CPU ladder: miniature models (d16l2 ... d512, head dim 16, byte vocabulary) for scaling studies.

    python -m linscale_jax.train --config=ladder:<arch>-<size> --workdir=DIR

arch: llama | tnl | hgrn2 | cosformer2 | gdn (Gated DeltaNet, beyond the paper: head dim 16, value
head 32), or a variant label <arch>+<field>=<value> (a model field or the arch's option, e.g.
cosformer2+tpe=none, tnl+short_conv=4, a hybrid stack tnl+hybrid=3:1, fewer and wider heads
hgrn2+n_heads=2; linscale_jax.models.sizes.split_variant); size: a key of
linscale_jax.models.sizes.LADDER. The other sections keep base_config()'s tiny-run defaults.
Why these shapes: docs/models.md, "The CPU ladder". Cost per step: docs/results.md, "Ladder step
costs and the token budget".
"""

from linscale_jax.config import base_config
from linscale_jax.models import sizes


def get_config(arg: str = "tnl-d64"):
    arch, size = sizes.parse_name(arg)
    c = base_config()
    c.name = arg
    sizes.apply_model(c.model, sizes.ladder_model(arch, size))
    c.data.vocab = "byte"
    return c
