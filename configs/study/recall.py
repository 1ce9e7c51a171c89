"""Miniature retrieval: MQAR recall of the four architectures against state size (study.recall).

    python -m study --config=configs/study/recall.py --workdir=/tmp/study_recall
"""

import ml_collections


def get_config():
    return ml_collections.ConfigDict(dict(
        kind="recall",
        archs="llama,tnl,hgrn2,cosformer2",
        shapes="d32e8,d64e16,d64e32",
        n_layers=2,
        n_pairs="4,8,16",
        n_keys=64,
        n_values=64,
        placement="power",
        power_a=0.01,
        seq_len=64,
        batch_size=64,
        max_steps=1500,
        lr="3e-3",
        warmup_steps=50,
        weight_decay=0.1,
        eval_every=100,
        val_sequences=256,
        stop_accuracy=0.99,
        eval_sequences=256,
        dnt_margin=0.1,
        seeds="0,1",
        workers=2,
    ))
