"""Hybrid stacks and Gated DeltaNet against softmax at equal compute: the main job's study
(configs/study/cpu.py: byte corpus, 12 checkpoints) with 3,145,728 tokens a run at every size and
one replicate seed of the smallest size, at the paper's protocol (configs/study/cpu_paper.py: lr 3e-3, batch 8 × 128,
β2 0.95, 64 warmup steps for every run) on the ladder's four-layer rungs d16, d32, d48, for

    llama, tnl, gdn, tnl+hybrid=3:1, hgrn2+hybrid=3:1, cosformer2+hybrid=3:1, gdn+hybrid=3:1,
    tnl+n_heads=4, gdn+expand_v=1

`<arch>+hybrid=3:1` is `model.layers=<arch>*3,llama`: three linear layers, then one softmax layer
(the MiniMax-01 / Olmo Hybrid / Kimi Linear layout), so at depth 4 exactly `<arch>,<arch>,<arch>,llama`.
The last two labels put a second state size beside tnl's and gdn's at every rung, the report's
state-size axis: `tnl+n_heads=4` (head dim d/4: h·e² = 64, 256, 576 state floats per layer at d16,
d32, d48 against tnl's 256, 512, 768; `n_heads=2` would equal tnl at d32) and `gdn+expand_v=1`
(value dim = key dim: 400, 800, 1,200 against gdn's 704, 1,408, 2,112, the short convolution's
inputs included).

    python -m linscale_jax.study --config=hybrid --workdir=DIR_HYBRID

DIR_HYBRID/report.md's finding 2 gives each arch - llama at equal compute with its verdict (gdn and
every hybrid against softmax), "Memory at decode" each arch's KV-cache bytes per token and state
floats per layer at its largest size, each KV figure as a ratio of llama's, and "State size as an
axis" the loss per doubling of the state at equal compute for tnl's and gdn's families (with
`--config.recall_from=R`, MQAR accuracy against the usable state too).

Why these rungs and this protocol: a 3:1 pattern is one period of four layers, and the model refuses
a pattern longer than its depth, so the two-layer rungs (d16l2, d32l2) cannot hold it
(`:first` has the same period); and gdn at d48 (N = 1.52e5 non-embedding) lies above the range the
tuned learning-rate rule was checked on for gdn (9.3e3 .. 6.9e4), which the rule refuses, so every
run here takes the paper's protocol, one rate for all.

Cost: 36 runs, 5.7e-7 PF-days of exact training compute (1.4 times the main job's); measured 71
CPU-minutes (52 for the first 28 runs, 19 for the 8 state variants), about 36 minutes on 2 idle cores. Results and cost: docs/results.md, "Hybrid stacks
and Gated DeltaNet (the `hybrid` preset)".

Recall at equal steps (finding 3: each arch against llama on MQAR) from the hybrid recall study
(configs/study/hybrid_recall.py), re-joining this one without training:

    python -m linscale_jax.study --config=hybrid --workdir=DIR_HYBRID --join_only --config.recall_from=DIR_RECALL
"""

from linscale_jax.study.presets import preset


def get_config():
    c = preset("cpu_paper")
    c.archs = ("llama,tnl,gdn,tnl+hybrid=3:1,hgrn2+hybrid=3:1,cosformer2+hybrid=3:1,gdn+hybrid=3:1,"
               "tnl+n_heads=4,gdn+expand_v=1")  # the last two: the state-size axis
    c.sizes = "d16,d32,d48"  # the four-layer rungs: one 3:1 period each
    c.tokens_by_size = ""  # one budget for every size (c.tokens), not the main job's per-size budgets
    c.replicates.update(sizes="smallest", seeds=1)  # one replicate of d16 per label (9 runs)
    return c
