"""The recall preset: MQAR accuracy of the four architectures, and of the linear three with a short
convolution, against the state floats per layer (study.recall).

    python -m linscale_jax.study --config=recall --workdir=DIR
    python -m linscale_jax.study --config=recall --workdir=DIR_EQUAL \
        --config.shapes=d64e16 --config.max_steps=3000    # finding 3: the control's shape and steps

Zoology's task (Arora et al. 2023) where the budget allows; each arch label at its own learning rate
from configs/study/recall_rates.json (configs/study/recall_sweep.py chose them). Each run is a
trainer run on data.task=mqar that stops once its validation accuracy reaches stop_accuracy
(train.stop_at), with checkpoints and resume (study.recall.train). Costs and the
measured table: docs/results.md "Recall (MQAR)".
"""

import ml_collections


def get_config():
    return ml_collections.ConfigDict(dict(
        kind="recall",
        archs="llama,tnl,hgrn2,cosformer2,tnl+short_conv=4,hgrn2+short_conv=4,cosformer2+short_conv=4",
        shapes="d16e4,d32e8,d64e16",  # (d_model, head dim), 4 heads: state h·e² per layer ×4 per step
        baseline_shapes="d64e16",  # the positive control (llama-d64e16 at 4 pairs)
        n_layers=2,
        model_changes="",  # every label's model: a variant's changes, e.g. "init_std=0.04" (the label's own win)
        n_pairs="4",
        n_keys=64,
        n_values=64,
        placement="power",
        power_a=0.01,
        seq_len=64,
        batch_size=32,
        max_steps=1000,  # the linear archs (38 runs; cost: docs/results.md "Recall (MQAR)")
        baseline_max_steps=3000,  # the positive control, which needs more steps than the linear archs
        sweep_steps=0,  # > 0: every label trains this many steps (configs/study/recall_sweep.py)
        lr="",  # "": per arch label from `rates`; or "3e-3", or "llama:1e-3,tnl:3e-3,..."
        rates="recall_rates",  # the packaged configs/study/recall_rates.json, or a path
        warmup_steps=50,
        schedule="constant",
        weight_decay=0.0,
        eval_every=100,  # validation (and the early stop's check) every N steps
        checkpoint_every=500,  # a checkpoint every N steps (and at the stop): a killed run resumes
        val_sequences=256,
        stop_accuracy=0.99,
        eval_sequences=256,
        dnt_margin=0.1,
        seeds="0,1",
        workers=2,
    ))
