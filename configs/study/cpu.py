"""The default miniature study (the README's main job): <= 60 minutes on 2 CPU cores.

    python -m linscale_jax.study --config=configs/study/cpu.py --workdir=/tmp/study_cpu
4 archs × 5 ladder sizes d32 d40 d48 d64 d96 (3 layers, 4..12 heads of dim 8; non-embedding N
3.8e4 .. 3.3e5, 0.9 decades; configs/ladder.py says why and what it costs), every size on the
same budget of 2048 steps × 8 × 128 = 2,097,152 byte tokens (55 .. 6 tokens per parameter), 16
checkpoints per run, every 128 steps (16 points per training curve for the envelope; the laws skip
checkpoints inside the 64-step warmup, so no log-spaced early ones).
Constant learning rate after warmup, so intermediate checkpoints are comparable with final ones on
the envelope. At this budget every run is still data-limited (tried on llama: cosine or constant,
8 × 128 or 32 × 128 tokens per step, lr 3e-3 or 1e-2), so the smallest size reaching a compute wins
almost everywhere; the fit therefore keeps the clamped envelope (fit.include_clamped, as the paper
does) and report.md says where the envelope is an optimum and where only a bound.
"""

from linscale_jax.study.presets import study_defaults


def get_config():
    c = study_defaults()
    c.sizes = "d32,d40,d48,d64,d96"
    c.tokens = 2048 * 8 * 128.0
    c.checkpoints = 16
    c.overrides.optim.update(lr=3e-3, warmup_steps=64, schedule="constant")
    c.overrides.checkpoint.log_spaced = 0
    c.eval.update(val_batches=8)
    c.fit.include_clamped = True
    return c
