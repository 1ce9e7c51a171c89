"""Miniature retrieval: MQAR recall of the four architectures (study.recall).

    python -m study --config=configs/study/recall.py --workdir=/tmp/study_recall
4 archs × 2 ladder sizes (d32: 4 heads, d64: 8 heads; head dim 8, 3 layers, as in the cpu study),
each trained by the trainer for 800 steps × 32 MQAR sequences of 64 tokens with 4, 8 or 16
key-value pairs (64 keys, 64 values), then scored on 256 test sequences per number of pairs.
Chance is 1/64. Writes DIR/recall.csv, DIR/recall.png and a section of DIR/report.md.
"""

import ml_collections


def get_config():
    return ml_collections.ConfigDict(dict(
        kind="recall",
        model_file="configs/ladder.py",
        archs="llama,tnl,hgrn2,cosformer2",
        sizes="d32,d64",
        n_pairs="4,8,16",
        n_keys=64,
        n_values=64,
        seq_len=64,
        batch_size=32,
        steps=800,
        lr=3e-3,
        warmup_steps=50,
        weight_decay=0.1,
        eval_sequences=256,
        seed=0,
    ))
