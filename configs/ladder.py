"""Tiny CPU ladder for miniature scaling studies: --config=configs/ladder.py:<arch>-<size>.

arch: llama | tnl | hgrn2 | cosformer2, or a variant label <arch>+<model field>=<value> (e.g.
cosformer2+tpe=none; linscale_jax.models.sizes.split_variant); size: d16 d32 d48 d64 d80 d96 d128
d192 d256 d384 d512. Shapes (linscale_jax.models.sizes.LADDER): (d, l) = (16,4) (32,4) (48,4) (64,4)
(80,4) (96,4) (128,4) (192,4) (256,6) (384,6) (512,8); head dim 16 at every size (h = d/16);
g = 8·ceil(int(8d/3)/8); byte vocabulary (259 ids padded to 264), context 2048.
`python -m linscale_jax.models.describe --json` prints every ladder config's head dim, state floats per
layer, TNL's per-layer decays and HGRN2's per-layer lower bounds (docs/results.md has the table).

Why these shapes (a miniature keeps the paper's mechanisms; shrink widths and steps, not them):
* Head dim 16. A linear head's state is e × e floats (cosFormer2's 2e × e with LRPE): 256 per head
  (512 for cosFormer2), 1,024-2,048 per layer at d64, against 16,384 per head in the paper. At head
  dim 8 it was 64, and HGRN2's outer-product state expansion, the point of that architecture,
  nearly vanished; LLaMA's RoPE keeps 8 frequencies instead of 4.
* Heads. h = d/16: 4 heads at d64 (the paper's 70M), 5 at d80, 6 at d96, up to 32 at d512. The cpu
  preset's two smallest sizes have fewer than the paper's 4: d32 has 2 heads and d48 has 3, so
  there TNL's decay spectrum has 2-3 values per layer and the output gate's rank d/h = 16 is d/2
  and d/3 (Table 1's head terms 1/(2h) are 25 % and 17 % of the compute, against 1.6-12.5 % in
  the paper). Both are the price of a 0.8-decade ladder inside the main job's 20 minutes: a
  4-head floor would start the ladder at d64, 4x the per-token cost of d32 (measured below).
* Depth 4 (6-8 at d256 and above). HGRN2's forget-gate lower bounds β_j = j/l start at 0, 1/4,
  1/2, 3/4 (the paper's 26 layers reach 0.96; 3 layers stopped at 2/3). Under the released TNL
  rule (tnl_decay_rule="alibi_layer") the undecayed last layer is 1 in 4, not 1 in 3.
* TNL decay, the paper's formula by default (model.tnl_decay_rule="paper"):
  λ_{i,j} = exp(-(8i/h)(1 - j/l)), head i = 0..h-1, layer j = 0..l-1. Head 0 keeps everything in
  every layer (λ = 1); the others forget within a few tokens, slower with depth: at d64
  (h = 4, l = 4) memories 1/(1-λ) of heads 1..3 are 1.2-1.0 tokens in layer 0 and 2.5, 1.6, 1.3 in
  layer 3 (the paper's 410M, h = 8, l = 25: up to 25 tokens in its last layer). The released rule
  (ALiBi slopes × (1 - j/(l-1))) stays selectable.
* Low-rank gate. TNL's and cosFormer2's output gate has rank e = 16: d/4 at d64, d/6 at d96.
* g. The paper rounds 8d/3 up to a multiple of 256, < 10 % above 8d/3 at its sizes; here a
  multiple of 8 (g = 88 at d32, 176 at d64).
* Cost: CPU time of one training step (batch 8 × 128, one core, XLA single-threaded, median of
  25 steps; `bench/train_step.py --clock=cpu`, docs/results.md "Ladder step costs"): llama d48/d64/d96
  16/23/40 ms, hgrn2 27/37/73 ms; head dim 8 with 3 layers took 10/35 ms (llama d32/d96) and
  16/49 ms (hgrn2). The cpu preset's sizes and token budget follow from these costs
  (configs/study/cpu.py gives the arithmetic).
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
