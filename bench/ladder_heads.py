"""Final val loss of few wide heads vs the ladder's many narrow heads at d48/d96, same data and budget.

    python bench/ladder_heads.py <arch> <steps> <shape>[,<shape>...] [workdir]
    e.g. python bench/ladder_heads.py tnl 300 wide-d48,ladder-d48

Shapes: wide-d48 (l2 h1 e48 g128, xmixers TPE), ladder-d48 (the ladder: l3 h6 e8 g128, LightNet
TPE), ladder-d48-xmixers / ladder-d48-none (cosFormer2's other TPEs at the ladder shape), wide-d96
(l3 h3 e32 g256), ladder-d96 (l3 h12 e8 g256). Optimiser as the cpu preset (constant lr 3e-3 after 64 warmup
steps), 8 × 128 byte tokens per step on the stdlib corpus, val loss on 8 batches at the end.
Prints one RESULT line per shape.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from linscale_jax.train import loop as trainer  # noqa: E402
from linscale_jax.config import base_config  # noqa: E402
from linscale_jax.models import sizes  # noqa: E402

SHAPES = {
    "wide-d48": dict(n_layers=2, d_model=48, n_heads=1, ffn_dim=128, cosformer2=dict(tpe="xmixers")),
    "ladder-d48": dict(n_layers=3, d_model=48, n_heads=6, ffn_dim=128, cosformer2=dict(tpe="lightnet")),
    "ladder-d48-xmixers": dict(n_layers=3, d_model=48, n_heads=6, ffn_dim=128, cosformer2=dict(tpe="xmixers")),
    "ladder-d48-none": dict(n_layers=3, d_model=48, n_heads=6, ffn_dim=128, cosformer2=dict(tpe="none")),
    "wide-d96": dict(n_layers=3, d_model=96, n_heads=3, ffn_dim=256, cosformer2=dict(tpe="xmixers")),
    "ladder-d96": dict(n_layers=3, d_model=96, n_heads=12, ffn_dim=256, cosformer2=dict(tpe="lightnet")),
}


def main(arch: str, steps: int, names: str, root: str = "/tmp/ladder_heads") -> None:
    for name in names.split(","):
        c = base_config()
        shape = {k: v for k, v in SHAPES[name].items() if k != "cosformer2" or arch == "cosformer2"}
        sizes.apply_model(c.model, dict(arch=arch, vocab_size=264, max_seq_len=2048, **shape))
        c.train.update(steps=steps, batch_size=8, seq_len=128, log_every=50, eval_every=steps, eval_batches=8)
        c.optim.update(lr=3e-3, warmup_steps=64, schedule="constant")
        c.checkpoint.update(every_steps=steps, log_spaced=0, async_save=False)
        workdir = Path(root) / f"{arch}-{name}-{steps}"
        t = time.time()
        trainer.train(c, workdir)
        rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
        val = [r["val_loss"] for r in rows if "val_loss" in r][-1]
        print(f"RESULT {arch} {name} steps={steps} train_loss={rows[-1]['loss']:.4f} val_loss={val:.4f} "
              f"time={time.time() - t:.0f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], *sys.argv[4:5])
