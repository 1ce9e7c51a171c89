"""The default miniature study (the README's main job): <= 60 minutes on 2 CPU cores.

    python -m linscale_jax.study --config=configs/study/cpu.py --workdir=/tmp/study_cpu
4 archs × 5 ladder sizes d64..d256 (non-embedding N ~ 1e5 .. 4.7e6, 1.7 decades), every size on
the same budget of 192 steps × 8 × 128 = 196,608 byte tokens, 12 dense + 4 log-spaced early
checkpoints per run (17 points per training curve for the envelope).
"""

from linscale_jax.study.presets import study_defaults


def get_config():
    c = study_defaults()
    c.sizes = "d64,d96,d128,d192,d256"
    c.tokens = 192 * 8 * 128.0
    c.checkpoints = 12
    return c
