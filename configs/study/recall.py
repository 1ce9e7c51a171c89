"""Miniature retrieval: MQAR recall of the four architectures against state size (study.recall).

    python -m study --config=configs/study/recall.py --workdir=/tmp/study_recall

Zoology's protocol (Arora et al. 2023, figure 2) where the budget allows:
* Task: sequences of 64 tokens with 4 key-value pairs (Zoology's (64, 4) cell), distinct keys and
  values (64 of each: chance 1/64), queries placed by Zoology's power law (a = 0.01), answers as
  targets only (an answer given as an input lets a model rule out the values already answered:
  0.52 at 4 pairs without binding keys to values). One number of pairs per run.
* Models: 2 layers (Zoology's depth), shapes d32e8 and d64e16 (d_model, head dim), so a linear
  layer's state h·k·e is 256 and 1,024 floats (TNL, HGRN2), 512 and 2,048 (cosFormer2, k = 2e);
  LLaMA's KV cache is 2·d·64 = 4,096 and 8,192. The shapes are defined here, not by
  configs/ladder.py.
* Training: AdamW, lr 1e-3 constant after 50 warmup steps, weight decay 0, up to 3,000 steps × 32
  sequences, early stop once the validation accuracy reaches 0.99 (checked every 100 steps on 256
  sequences). Measured on llama-d64e16 (docs/results.md "Recall (MQAR)"): this recipe reaches 0.957
  and 0.960 (seeds 0, 1) at 3,000 steps; lr 2e-3 or 3e-3 never leaves the copy level (1/4), a
  cosine decay reached 0.60 on seed 1, 1,500 steps 0.45. A sweep is
  `--config.lr=llama:1e-3/3e-3,tnl:1e-3/3e-3,...` (best mean validation accuracy kept per shape).
* Seeds 0 and 1 (init and data order); 256 test sequences per cell and seed.
* Budget: 16 runs on 2 single-core workers, about 30-35 CPU-minutes (15-18 minutes on an idle
  2-core machine). Zoology trains 100k sequences × 64 epochs per cell; this preset sees 96k.
A run whose test loss stays within 0.1 nats of ln 64 is reported "did not train". LLaMA reaching
0.9 in some cell is the positive control; without it the recall comparison is "not measured".
"""

import ml_collections


def get_config():
    return ml_collections.ConfigDict(dict(
        kind="recall",
        archs="llama,tnl,hgrn2,cosformer2",
        shapes="d32e8,d64e16",
        n_layers=2,
        n_pairs="4",
        n_keys=64,
        n_values=64,
        placement="power",
        power_a=0.01,
        seq_len=64,
        batch_size=32,
        max_steps=3000,
        lr="1e-3",
        warmup_steps=50,
        schedule="constant",
        weight_decay=0.0,
        eval_every=100,
        val_sequences=256,
        stop_accuracy=0.99,
        eval_sequences=256,
        dnt_margin=0.1,
        seeds="0,1",
        workers=2,
    ))
