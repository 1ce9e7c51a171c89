"""Tiny CPU ladder for miniature scaling studies: --config=configs/ladder.py:<arch>-<size>.

arch: llama | tnl | hgrn2 | cosformer2;  size: d16 d32 d48 d64 d96 d128 d192 d256 d384 d512.
Shapes (linscale_jax.models.sizes.LADDER): head dim 32 (one head of d below d64), g = 32·ceil(int(8d/3)/32),
byte vocabulary (259 ids padded to 264), context 2048, (d, l) = (16,2) (32,2) (48,2) (64,2) (96,3)
(128,4) (192,4) (256,6) (384,6) (512,8).
The other sections keep base_config()'s tiny-run defaults (embedded corpus, byte vocab).
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
