"""Evaluation of a run's Orbax checkpoints (see linscale_jax/eval/README.md).

  python -m linscale_jax.eval --workdir=DIR [--steps=all|last|S1,S2] [--tasks=val_loss,niah,niah_easy,probe,...]
  python -m linscale_jax.eval.export --workdir=DIR1 --workdir=DIR2 ... --out=table.csv      # the table fit/ reads
  python -m linscale_jax.eval.generate --workdir=DIR --prompt="..."                # greedy / sampled decoding
  python -m linscale_jax.eval.lm_eval --model linscale --model_args workdir=DIR,step=S --tasks ...

Modules: runner (checkpoints x tasks, results.jsonl), suite (the tasks), val_loss, perplexity
(WikiText-2 / LAMBADA style files), niah + niah_metrics, generate, lm_backend (lm-eval model
"linscale"), commonsense (task groups and paper averages), probe (corpus multiple-choice probe),
export, loading (checkpoint -> model + vocabulary).
"""
