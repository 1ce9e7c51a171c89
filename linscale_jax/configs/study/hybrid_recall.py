"""Recall of the hybrid stacks and Gated DeltaNet against softmax at equal steps: MQAR accuracy
(the `recall` kind, study.recall) of

    llama, tnl, gdn, tnl+hybrid=3:1, hgrn2+hybrid=3:1, cosformer2+hybrid=3:1, gdn+hybrid=3:1

at the positive control's shape d64e16 (4 heads of dim 16), 4 layers for every label (one 3:1
period: `<arch>,<arch>,<arch>,llama`; the llama control at the same depth), every label's token
embedding scaled by sqrt(d_model) (model_changes; below), every label allowed the same 4,000 steps
(equal steps is the comparison), seeds 0 and 1, each label at its own learning rate from
configs/study/hybrid_recall_rates.json (configs/study/hybrid_recall_sweep.py chose them; until it
ships, `--config.lr=1e-3` runs every label at the rate the control passed at).

The embedding scale: with the paper's embedding (std 0.02, unscaled, tied) a four-layer llama never
leaves the copy level on this task (6,000 steps at 1e-3; 3,000 at 3e-4 and 3e-3): it forms no
previous-token head (`python -m linscale_jax.study.recall.attention DIR/runs/<run>`). Scaled by
sqrt(d) it does. It leaves the copy plateau at a step that varies by seed (2,200 with seed 0, 2,900
with seed 1): the seed mean is 0.73 at 3,000 steps and 0.95 at 4,000, so every label gets 4,000. The
task and the optimizer are the recall preset's; the change is the same for every label.

    python -m linscale_jax.study --config=hybrid_recall_sweep --workdir=DIR_RECALL   # seed 0, the rates
    cp DIR_RECALL/recall_rates.json linscale_jax/configs/study/hybrid_recall_rates.json
    python -m linscale_jax.study --config=hybrid_recall --workdir=DIR_RECALL         # adds seed 1
    python -m linscale_jax.study --config=hybrid --workdir=DIR_HYBRID --join_only \
        --config.recall_from=DIR_RECALL     # the hybrid report's recall verdicts at equal steps

The sweep's seed-0 runs at the chosen rates are this preset's seed-0 runs (the schedule is constant
and every field matches): run in the sweep's workdir, the preset trains only the seed-1 runs. The
task and the training protocol are the recall preset's (configs/study/recall.py). Costs and the measured table:
docs/results.md "Hybrid stacks and Gated DeltaNet", its recall part.
"""

from linscale_jax.study.presets import preset


def get_config():
    c = preset("recall")
    c.update(dict(
        archs="llama,tnl,gdn,tnl+hybrid=3:1,hgrn2+hybrid=3:1,cosformer2+hybrid=3:1,gdn+hybrid=3:1",
        shapes="d64e16", baseline_shapes="d64e16",
        n_layers=4,  # one 3:1 period; a label whose layer pattern does not fit the depth is refused
        model_changes="embed_scale=sqrt_d",  # every label: the four-layer control needs it (docstring)
        max_steps=4000, baseline_max_steps=4000,  # equal steps for every label, the control included
        rates="hybrid_recall_rates",
    ))
    return c
