"""Train a SentencePiece model on a corpus, for `data.vocab=sentencepiece:<FILE.model>`.

  python -m linscale_jax.data.train_spm --corpus=stdlib --vocab_size=8000 --out=/tmp/stdlib8k.model
  python -m linscale_jax.data.train_spm --corpus=/data/a.jsonl,/data/b.txt --vocab_size=32000 --out=m.model

The model uses the seqio id layout (pad 0, eos 1, unk 2, no bos), byte fallback (every text
round-trips), no normalisation and kept whitespace (code indentation survives). It is trained on the
train split only (data.val_fraction as in the default config), one line of text per sentence, with
newlines and tabs as whole pieces.
"""

from __future__ import annotations

import argparse
import os
import time

from linscale_jax.errors import ArgumentParser
from linscale_jax.config import base_config


def sentences(corpus: str, max_bytes: int, text_key: str = "text"):
    """Non-empty lines of the corpus' train split, up to max_bytes of text."""
    from linscale_jax import data  # TensorFlow import: keep `--help` fast
    from linscale_jax.data import sources

    cfg = base_config().data
    cfg.task, cfg.paths = sources.input_task(corpus)
    cfg.text_key = text_key
    total = 0
    for doc in data.corpus_documents(cfg, "train"):
        for line in doc.split("\n"):
            if line.strip():
                yield line
                total += len(line.encode("utf-8"))
                if total >= max_bytes:
                    return


def train(corpus: str, vocab_size: int, out: str, *, max_bytes: int = 50_000_000, model_type: str = "bpe",
          text_key: str = "text") -> str:
    """Train and write `out` (a .model file); returns its path."""
    import sentencepiece as spm

    if not out.endswith(".model"):
        raise SystemExit(f"--out must end with .model, got {out!r}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=sentences(corpus, max_bytes, text_key),
        model_prefix=out[: -len(".model")],
        vocab_size=vocab_size,
        model_type=model_type,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        split_digits=True,
        add_dummy_prefix=False,
        user_defined_symbols=["\n", "\t"],
        max_sentence_length=16384,
        minloglevel=2,
    )
    return out


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="stdlib", help="stdlib, tfds:<name>, or comma-separated files/dirs/globs")
    parser.add_argument("--vocab_size", type=int, required=True, help="pieces incl. 259 special+byte pieces")
    parser.add_argument("--out", required=True, help="output FILE.model (FILE.vocab is written next to it)")
    parser.add_argument("--model_type", default="bpe", choices=["bpe", "unigram"])
    parser.add_argument("--max_bytes", type=int, default=50_000_000, help="train on at most this much text")
    parser.add_argument("--text_key", default="text", help="jsonl text field")
    args = parser.parse_args(argv)
    start = time.time()
    out = train(args.corpus, args.vocab_size, args.out, max_bytes=args.max_bytes, model_type=args.model_type,
                text_key=args.text_key)
    print(f"wrote {out} (vocab {args.vocab_size}) in {time.time() - start:.1f}s; "
          f"use --config.data.vocab=sentencepiece:{out} --config.model.vocab_size={args.vocab_size}")


if __name__ == "__main__":
    main()
