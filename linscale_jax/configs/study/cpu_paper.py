"""The main job under the paper's protocol: configs/study/cpu.py with one learning rate for every
size and arch (optim.rule=paper: lr 3e-3, batch 8 × 128, β2 0.95, 64 warmup steps), as the paper
trains every size at Adam lr 3e-4. The report judges each finding under both protocols from this
study and the main job's.

    python -m linscale_jax.study --config=cpu_paper --workdir=DIR_PAPER
No seed sd prior measures this protocol, so it measures its own on one replicate seed of d64l2,
d80l2 and d96l2 per arch (32 runs, 12 df) where the main job repeats d96l2 alone and pools with its
prior; its cost at these budgets is not measured.
"""

from linscale_jax.study.presets import preset


def get_config():
    c = preset("cpu")
    c.overrides.optim.update(rule="paper", lr=3e-3, warmup_steps=64, b2=0.95)
    c.overrides.train.batch_size = 8
    c.replicates.update(sizes="d64l2,d80l2,d96l2", seeds=1)  # no prior of this protocol: its own 12 df
    return c
