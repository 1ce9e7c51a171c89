"""The tuning grid: peak learning rate, batch and AdamW β2 per ladder size (Porian et al. 2024).

    python -m linscale_jax.study --config=tune --workdir=DIR
llama at d16l2 d16 d32l2 d32 d48 on the cpu preset's token budget per cell (1,572,864 byte tokens),
a constant rate after a warmup of N tokens, judged by the loss after a 10 % cooldown; the grid is
pruned in stages (study.tune_grid: a coarse lr sweep, β2 and batch around its optimum, lr re-tuned ±1
step), then tnl, hgrn2 and cosformer2 are checked against llama's rule at d16l2 and d48. Writes
DIR/tune/ (the rule file linscale_jax.train.rule reads, cells.csv/md, lr.png). Costs about 100
CPU-minutes, two runs at a time (figures: docs/results.md "The tuning grid").

Another arch checked against the grid's rule (linscale_jax/train/grid_rule.json, optim.rule=grid),
without tuning llama again:
    python -m linscale_jax.study --config=tune --workdir=DIR --config.tune.rule_from=linscale_jax/train/grid_rule.json \
        --config.tune.check_archs=gdn --config.tune.check_sizes=d16l2,d32
writes DIR/tune/rule.json: that file with gdn's check (same_as llama, or its own lr rule) added.
The shipped default (linscale_jax/train/tuned_rule.json, optim.rule=tuned) is the grid's rule checked
at the main job's sizes, then at 4x the rule's token budget (a horizon check: the laws stay; the
check goes under horizon_checks and, where the file holds the same sizes' best rates at its own
budget, the exponent g of lr* ∝ D^-g under horizon, which makes the file's rate follow each run's
length):
    python -m linscale_jax.study --config=tune --workdir=L --config.tune.rule_from=linscale_jax/train/grid_rule.json \
        --config.tune.check_archs=llama,tnl,hgrn2,cosformer2 --config.tune.check_sizes=d32l2,d64l2,d96l2
    python -m linscale_jax.study --config=tune --workdir=LH --config.tune.rule_from=L/tune/rule.json \
        --config.tune.check_archs=llama,tnl,hgrn2,cosformer2 --config.tune.check_sizes=d32l2,d64l2 --config.tokens=6291456
(the first at the file's budget, so each (arch, size) pairs its two best rates; docs/results.md,
"The rule at the ladder's own sizes" and "The rule's rate at 4x its token budget").
"""

from linscale_jax.study.presets import study_defaults


def get_config():
    c = study_defaults("tune")
    c.archs = "llama"  # tuned at every size; check_archs are checked against its rule
    c.sizes = "d16l2,d16,d32l2,d32,d48"
    c.tokens = 1536 * 8 * 128.0  # every cell's budget, whatever its batch
    c.checkpoints = 6
    c.workers = 2
    c.overrides.optim.update(schedule="constant", rule="paper", b2=0.99)  # each cell sets lr, batch, b2, warmup
    c.overrides.checkpoint.log_spaced = 0
    c.eval.update(val_batches=32)
    c.estimators = "val_loss,cooldown"
    c.cooldown.update(points=1, fraction=0.1, shape="1-sqrt")  # the last checkpoint, cooled down
    c.tune = dict(
        lr_base=1e-3,  # lr = lr_base · 2^k: the factor-2 grid
        prior_lr=4e-3, prior_n=5.0e4, prior_exponent=-0.5,  # stage 1's centre: lr ∝ 1/width
        lr_points=5,  # stage 1's rates per size
        max_extend=3,  # steps a line of rates (or the batch axis) may grow at an edge
        extend_within=0.03,  # nats: grow a line at its edge only when its best is this close
        batch=8, batches="4,8,16", max_batch=64,  # sequences of train.seq_len per step
        beta2=0.99, beta2s="0.95,0.99,0.999",
        warmup_tokens_per_param=1.0,  # Porian et al.: warmup of about N tokens
        replicate_sizes="smallest,largest",  # one more seed of their best cell: the seed sd
        check_archs="tnl,hgrn2,cosformer2", check_sizes="d16l2,d48",  # the tuned range's ends
        own_rule_factor=2.0,  # an arch whose best rate is more than 2x from the rule gets its own
        rule_from="",  # a rule file (e.g. linscale_jax/train/grid_rule.json): tune nothing, check against it
        bootstrap=1000, seed=0,
    )
    return c
