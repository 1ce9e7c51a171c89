r"""The main job: the paper's scaling study (Shen et al. 2024) in miniature, 4 archs x 5 sizes on 2 CPU cores.

llama, tnl, hgrn2 and cosformer2 on a ladder of one shape, d32l2 d48l2 d64l2 d80l2 d96l2 of
configs/ladder.py (depth 2, head dim 16, 2 to 6 heads; non-embedding N 2.5e4 .. 2.3e5), each size
on its own budget of byte tokens of the embedded corpus, about inversely proportional to N so every
rung ends near one compute and the envelope brackets the optimum for every arch (study.tokens_by_size:
12.6M tokens at d32l2 down to 1.43M at d96l2; docs/results.md "The main job"), with 12 checkpoints
and one replicate seed of d96l2 per arch (24 runs). The seed sd the intervals use pools the study's
own 4 df (d96l2, the cheapest rung to repeat) with the packaged prior's 36 df (three finished
studies of this ladder that repeated d64l2, d80l2 and d96l2: configs/study/cpu_seed_sd.json,
study.noise.prior) unless an F test rejects one sd; the own 4 df are that test's. Learning rate, batch and AdamW β2 per arch and size from the tuned rule
(optim.rule=tuned: linscale_jax/train/tuned_rule.json, the tuning grid's laws checked at these
sizes, tnl on its own rate, each run's rate falling with its length as D^-0.17): batch 4 x 128
(24,576 steps at d32l2 to 2,784 at d96l2), peak lr 3.0e-3 (llama, d32l2) .. 1.2e-3 (tnl, d32l2),
β2 0.999, constant after a warmup of N tokens. Losses under val_loss and cooldown; laws, envelope
bracketing, held-out check, backtest and the paper's findings in DIR/report.md.
configs/study/cpu_paper.py trains the same 20 runs at one rate (the paper's protocol), with its own
replicates; passing its workdir judges every finding under both protocols. The 4x prediction
(configs/study/predict.py) first completes this ladder with a replicate seed of d64l2 and d80l2 per
arch (8 runs) and predicts from the laws of that 32-run ladder.

Run it, which takes 19.5 minutes on 2 AMD EPYC cores (37 CPU-minutes, warm caches;
docs/results.md "The main job"; the 32-run design of the prior's studies,
--config.replicates.sizes=d64l2,d80l2,d96l2, took 26–31 minutes there and 15–18 on 2 Intel Xeon
cores):

python -m linscale_jax.study --config=cpu --workdir=/tmp/study \
    --config.protocol_from=/tmp/study_paper
"""

from linscale_jax.study.presets import study_defaults


def get_config():
    c = study_defaults("scaling")
    c.sizes = "d32l2,d48l2,d64l2,d80l2,d96l2"  # one shape: depth 2, head dim 16, 2..6 heads
    c.tokens = 3072 * 8 * 128.0  # the budget of a size tokens_by_size leaves out
    c.tokens_by_size = "d32l2=12582912,d48l2=5713920,d64l2=3145728,d80l2=2027520,d96l2=1425408"  # ~1/N
    c.checkpoints = 12
    c.workers = 2  # two runs at once, one per core (study.workers)
    c.overrides.optim.update(lr=3e-3, warmup_steps=64, schedule="constant", rule="tuned")
    c.overrides.checkpoint.log_spaced = 0
    c.eval.update(val_batches=32)
    c.eval.final_runs = "largest"  # NIAH + probe at chance below the largest size
    c.estimators = "val_loss,cooldown"  # the paper's estimator (the laws, plots), and cooldowns beside it
    c.cooldown.update(points=3, fraction=0.1, shape="1-sqrt")  # the last checkpoint, 1/2, 1/4
    c.replicates.update(sizes="d96l2", seeds=1)  # the study's own seed sd, 4 df: the check of the prior
    c.noise.seed_sd = 0.05  # nats: assumed only for an arch without replicates
    c.noise.prior = "cpu_seed_sd"  # 3 finished studies of this design, 36 df (study.scaling.seed_prior)
    c.fit.include_clamped = True
    return c
