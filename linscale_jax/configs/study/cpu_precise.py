"""The main job with its seed noise measured on 24 df: configs/study/cpu.py with three seeds at
d32l2, d48l2 and d96l2 (the ends of the ladder and one between) in place of two at d64l2, d80l2 and
d96l2 (the 32-run design, 12 df; the main job repeats d96l2 alone, 24 runs), 44 runs. Its laws predict N_opt's loss at 4× the ladder's compute
more closely: the 4× prediction's target (3 of 4 archs within 0.03) was met at ladder seeds 0, 7
and 21 (3, 4 and 4 of 4), against 2, 3 and 3 of 4 from the 32-run design's ladder (docs/results.md,
"A prediction 4× beyond"). 1.6× the 32-run design's time on 2 idle cores (24 minutes on a day that design
took 15; docs/results.md "The study twice"), past its 20.

    python -m linscale_jax.study --config=cpu_precise --workdir=DIR
    python -m linscale_jax.study --config=predict --workdir=P --config.ladder_from=DIR --config.ladder_preset=cpu_precise --config.seeds=2 --config.replicates.sizes=
"""

from linscale_jax.study.presets import preset


def get_config():
    c = preset("cpu")
    c.replicates.update(sizes="d32l2,d48l2,d96l2", seeds=2)
    return c
