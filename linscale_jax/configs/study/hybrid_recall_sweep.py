"""The hybrid recall preset's learning-rate sweep (configs/study/hybrid_recall.py): one seed, the
preset's 4,000 steps, at d64e16 and 4 layers, every label's embedding scaled by sqrt(d) as in the
preset; gdn and each 3:1 hybrid at 1e-3 and 3e-3 (around the
two-layer recall sweep's winners: 1e-3 for llama and tnl, 3e-3 for cosFormer2 and every
short-convolution variant), llama and tnl at their two-layer rate 1e-3 alone (llama learnt to recall
at no other rate of five there; tnl stayed at the copy level at every rate). The rate kept per
label has the best validation accuracy after the preset's steps (study.recall.table.best_lr).

    python -m linscale_jax.study --config=hybrid_recall_sweep --workdir=DIR_SWEEP
    cp DIR_SWEEP/recall_rates.json linscale_jax/configs/study/hybrid_recall_rates.json
    python -m linscale_jax.study --config=hybrid_recall --workdir=DIR_SWEEP   # the preset: adds seed 1

Cost: docs/results.md "Hybrid stacks and Gated DeltaNet", its recall part.
"""

from linscale_jax.study.presets import preset

RATES = "1e-3/3e-3"


def get_config():
    c = preset("hybrid_recall")
    c.update(dict(seeds="0", sweep_steps=4000, lr=",".join(
        ["llama:1e-3", "tnl:1e-3"] + [f"{label}:{RATES}" for label in
                                      ("gdn", "tnl+hybrid=3:1", "hgrn2+hybrid=3:1", "cosformer2+hybrid=3:1",
                                       "gdn+hybrid=3:1")])))
    return c
