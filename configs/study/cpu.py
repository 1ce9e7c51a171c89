"""The main job: the miniature scaling study of the README, 4 archs × 5 sizes on 2 CPU cores.

    python -m study --config=configs/study/cpu.py --workdir=/tmp/study
llama, tnl, hgrn2, cosformer2 at d16l2 d16 d32l2 d32 d48 (configs/ladder.py; non-embedding N
6.7e3 .. 1.1e5; below d32 one head or two layers), each on 3,145,728 byte tokens with 12
checkpoints, a constant rate after a warmup of N tokens, learning rate, batch and β2 per arch and
size from the tuned rule (optim.rule=tuned: linscale_jax/train/tuned_rule.json, fitted by
configs/study/tune.py), val_loss and cooldown estimators, one replicate seed of the smallest size.
The paper's protocol (one rate for every size) on the same runs: configs/study/cpu_paper.py.
Costs about 20 minutes on 2 idle cores (two runs at a time); figures and the report's verdicts:
docs/results.md "The main job".
"""

from study.presets import study_defaults


def get_config():
    c = study_defaults()
    c.sizes = "d16l2,d16,d32l2,d32,d48"  # the envelope brackets the optimum here (docs/results.md)
    c.tokens = 3072 * 8 * 128.0  # every size, whatever its batch
    c.checkpoints = 12
    c.workers = 2  # two runs at once, one per core (study.workers)
    c.overrides.optim.update(lr=3e-3, warmup_steps=64, schedule="constant", rule="tuned")
    c.overrides.checkpoint.log_spaced = 0
    c.eval.update(val_batches=32)
    c.eval.final_runs = "largest"  # NIAH + probe at chance below the largest size
    c.estimators = "val_loss,cooldown"  # the paper's estimator (the laws, plots), and cooldowns beside it
    c.cooldown.update(points=3, fraction=0.1, shape="1-sqrt")  # the last checkpoint, 1/2, 1/4
    c.replicates.update(sizes="smallest", seeds=1)  # the seed sd per arch, measured in the study
    c.noise.seed_sd = 0.05  # nats: assumed only for an arch without replicates
    c.fit.include_clamped = True
    return c
