"""Miniature retrieval: MQAR recall of the four architectures against state size (study.recall).

    python -m study --config=configs/study/recall.py --workdir=/tmp/study_recall

Zoology's protocol (Arora et al. 2023, figure 2) where the budget allows:
* Task: sequences of 64 tokens with 4 key-value pairs (Zoology's (64, 4) cell), distinct keys and
  values (64 of each: chance 1/64), queries placed by Zoology's power law (a = 0.01). One number of
  pairs per run: training on the mixture 4/8/16 at seq 64 reached 0.31 on 4 pairs after 2,000
  steps (llama-d64e16, batch 64, lr 3e-3), one number of pairs 0.50 after 600.
* Models: 2 layers (Zoology's depth), shapes d32e8, d64e16, d64e32 (d_model, head dim), so a
  linear layer's state h·k·e is 256, 1,024, 2,048 floats (TNL, HGRN2) and 512, 2,048, 4,096
  (cosFormer2, k = 2e); LLaMA's KV cache is 2·d·64 = 4,096 and 8,192. The shapes are defined here,
  not by configs/ladder.py.
* Training: AdamW, lr 3e-3 with 50 warmup steps and a cosine decay over max_steps, weight decay
  0.1; at most 600 steps × 32 sequences, early stop once the validation accuracy reaches 0.99
  (checked every 100 steps on 256 sequences). The rate is measured for llama: at 1,500 steps on the
  mixture above, 3e-3 gave 0.16 validation accuracy, 1e-2 0.13, 3e-2 0.11. A sweep is
  `--config.lr=llama:1e-3/3e-3,tnl:3e-3/1e-2,...` (best mean validation accuracy kept per shape).
* Seeds 0 and 1 (init and data order); 256 test sequences per cell and seed.
* Budget: 24 runs on 2 single-core workers, sized for 15 minutes on an idle 2-core machine
  (docs/results.md gives the measured time). Zoology trains 100k sequences × 64 epochs per cell;
  this preset sees 19k sequences.
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
