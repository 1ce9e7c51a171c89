"""Tiny CPU ladder for miniature scaling studies: --config=configs/ladder.py:<arch>-<size>.

arch: llama | tnl | hgrn2 | cosformer2;  size: d32 d40 d48 d64 d80 d96 d128 d192 d256 d384 d512.
Shapes (linscale_jax.models.sizes.LADDER): (d, l) = (32,3) (40,3) (48,3) (64,3) (80,3) (96,3)
(128,4) (192,4) (256,6) (384,6) (512,8); head dim 8 at every size (h = d/8); g = 8·ceil(int(8d/3)/8); byte
vocabulary (259 ids padded to 264), context 2048.

Why these shapes (a miniature keeps the paper's structure; `python -m linscale_jax.models.describe
--config=configs/ladder.py:tnl-d32 --json` prints head_dim and TNL's decay_per_layer):
* Heads. The paper keeps head dim 128 and has 4 heads at 70M up to 32 at 7B. TNL's decays are
  ALiBi slopes over the heads, so the head count sets TNL's memory spectrum: with h heads the
  fastest head has slope 2^(-8/h) and the slowest 2^-8. One fixed head dim of 8 gives h = 4 at
  d32 up to h = 12 at d96 (the cpu preset), inside the paper's range. A head dim of 16 or 32 would
  need d >= 64 or d >= 128 for 4 heads, i.e. 3-10x the compute of the cpu preset's smallest sizes.
* Low-rank gate. TNL's and cosFormer2's output gate has rank d/h = 8, a quarter of d at d32 and a
  twelfth at d96 (the paper: d/4 .. d/32), so Table 1's head terms 1/(2h), 1/(3h), 3/(4h) are a few
  % of the compute, as in the paper, not 30-75 %.
* Depth. At least 3 layers: the ALiBi-per-layer rule leaves the last layer undecayed, so 1 layer
  in 3 (a minority) instead of 1 in 2. Every non-final layer then has a fast head (memory
  1/(1-λ) <= 16 tokens: layer 1 of 3 at d32 has 8.5) and slow heads (>= 256 tokens).
  tests/models/test_ladder.py checks all of this for every ladder size.
* g. The paper rounds 8d/3 up to a multiple of 256, < 10 % above 8d/3 at its sizes; here a
  multiple of 8 (g = 88 at d32, 256 at d96), not 32 (which gave 4d at d16).
* Cost. The cpu preset trains d32 d40 d48 d64 d96 (N 3.8e4 .. 3.3e5 non-embedding, 0.9 decades,
  15 layers in all); d80 is on the ladder for studies that can afford it.
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
