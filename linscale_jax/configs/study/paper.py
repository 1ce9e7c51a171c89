"""The paper's study for TPU pods: six sizes x 4 archs, 300B tokens each.

    python -m linscale_jax.study --config=configs/study/paper.py --workdir=DIR --dry_run   # the runs, their PF-days
    python -m linscale_jax.study --config=configs/study/paper.py --workdir=DIR --shard=i/n  (per slice)
Model shapes and training settings come from configs/paper.py (model_file). A checkpoint every 1,000 steps plus
8 log-spaced early ones give ~84 points per curve. Data: set overrides.data (e.g. data.task =
"tfds:<name>") to the pretraining corpus.
"""

from linscale_jax.study.presets import study_defaults


def get_config():
    c = study_defaults("scaling")
    c.model_file = "paper"  # configs/paper.py
    c.sizes = "70m,160m,410m,1b,3b,7b"
    c.tokens = 300e9
    c.checkpoints = 76
    c.overrides = dict(train=dict(log_every=100, eval_every=1000),
                       optim=dict(rule="paper"),  # lr 3e-4 at every size (configs/paper.py)
                       checkpoint=dict(log_spaced=8, async_save=True))
    c.eval.update(val_batches=16, niah_grid="35x35", probe_items=256)
    c.fit.update(bootstrap=200, include_clamped=False)
    return c
