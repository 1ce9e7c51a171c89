"""Data: prepared records (packed, tokenised rows read by global index), vocabularies, raw documents.

  rows = data.train_rows(config)          # what training reads
  rows.rows(step, [r0, r1, ...])          # numpy [k, t]: rows r0, r1, ... of the global batch of step
                                          #   `step` (0-based): inputs, targets, segment_ids (int32),
                                          #   weights (float32); a pure function of (data.seed, step, r)
  rows.state(step); rows.check_state(s)   # JSON-serialisable; resuming is a seek to a step
  it = data.make_iterator(config)         # the whole global batches in order (get_state/set_state)
  data.eval_batches(config, split="validation", num_batches=N)   # fixed list of global batches
  data.corpus_documents(config.data, split)                      # raw document strings
  data.check_training(config, rows, say=print)                   # before training: repeats, eval rows
  vocab = data.get_vocabulary(config.data)                      # seqio.Vocabulary (eval, decoding)

Global batch. Row r of step s is record order[s·B + r] of the train split, where B =
train.batch_size and order is Grain's index shuffle of the rows seeded by data.seed (a new
permutation every epoch; data.records). The batch is defined by the config alone: each process
reads only the rows its devices hold (linscale_jax.train.batches), and the same rows come back for
any process count. Evaluation reads the first num_batches·B rows of the validation split in one
fixed order (VALIDATION_SEED's, whatever data.seed: replicate seeds are scored on the same rows;
one pass; the last batch is padded with empty rows).

Config (config.data): task (a data.sources form: stdlib | files | tfds:<name> | records:<dir> |
mqar), vocab (byte | sentencepiece:<path> | cl100k_base | hf:<tokenizer.json>), paths, text_key,
txt_document, tfds_data_dir, tiktoken_file, val_fraction, seed. task=records:<dir> reads what
`python -m linscale_jax.data.prepare` wrote; every other text task is prepared on first use into
a local cache (data.rows.cache_root: $LINSCALE_DATA_CACHE, else ~/.cache/linscale_jax/records).
Importing this package does not import TensorFlow; seqio Tasks (get_task) and tfds inputs do.
"""

from __future__ import annotations

from typing import Iterator

from linscale_jax.data import sources
from linscale_jax.data.errors import DataError
from linscale_jax.data.records import Records
from linscale_jax.data.rows import RecordRows, StepIterator, check_model_vocab, open_records, records_dir

__all__ = ["DataError", "Records", "RecordRows", "check_training", "corpus_documents", "eval_batches", "get_task",
           "get_vocabulary", "make_iterator", "open_records", "records_dir", "train_rows"]


def get_task(data_config):
    """The registered seqio.Task of a stdlib/files/tfds corpus (imports TensorFlow)."""
    from linscale_jax.data import tasks

    return tasks.get_task(data_config)


def get_vocabulary(data_config):
    """The seqio.Vocabulary named by data.vocab (imports TensorFlow); data.tokenize has the same ids."""
    from linscale_jax.data import vocab

    return vocab.get_vocabulary(data_config)


VALIDATION_SEED = 0  # the order evaluation reads prepared records in, for every data.seed


def _rows(config, split: str):
    """The row source of `split`: the source's own (synthetic) rows, or its prepared records (the
    train split in data.seed's order, the others in VALIDATION_SEED's)."""
    src = sources.of(config.data)
    if src.rows is not None:
        return src.rows(config, split)
    seed = int(config.data.seed) if split == "train" else VALIDATION_SEED
    return RecordRows(open_records(config, split), int(config.train.batch_size), seed)


def train_rows(config):
    """The row source of training (see module docstring): records, or synthetic MQAR."""
    return _rows(config, "train")


def make_iterator(config, split: str = "train") -> StepIterator:
    """Infinite iterator of whole global batches of `split` (step 0, 1, ...)."""
    return StepIterator(_rows(config, split))


def eval_batches(config, split: str = "validation", num_batches: int = 4) -> list[dict]:
    """The first `num_batches` global batches of one pass over `split` in VALIDATION_SEED's order
    (fewer if the split is short; the last one padded with empty rows)."""
    return _rows(config, split).one_pass(num_batches)


def check_training(config, rows, say=print) -> None:
    """Before the first step of a run reading prepared records: one warning line (through `say`)
    when train.steps x train.batch_size rows read the train split more than once, with the number
    of passes; a DataError when periodic evaluation (train.eval_every > 0) asks for more batches
    (train.eval_batches) than the validation split holds."""
    if not isinstance(rows, RecordRows):  # synthetic rows (MQAR): drawn fresh for every step
        return
    tr, n = config.train, len(rows.records)
    batch, steps = int(tr.batch_size), int(tr.steps)
    passes = steps * batch / max(n, 1)
    if passes > 1:
        say(f"WARNING: the train split holds {n:,} rows of {rows.seq_len} tokens; {steps:,} steps of {batch} "
            f"rows read it {passes:.1f} times (each pass in a new order); for no repeats use "
            f"--config.train.steps={n // batch} or more text ({rows.records.directory}).")
    wanted = int(tr.eval_batches) if int(tr.eval_every) > 0 else 0
    if wanted <= 0:
        return
    val = open_records(config, "validation")
    held = -(-len(val) // batch)  # batches of one pass, the last one padded
    if held < wanted:
        fewer = f"--config.train.eval_batches={held}" if held else "--config.train.eval_every=0"
        raise DataError(
            f"the validation split holds {len(val):,} rows, {held} batch{'es' if held != 1 else ''} of {batch}, "
            f"fewer than train.eval_batches={wanted} ({val.directory}); set {fewer}, or hold out more text "
            f"(--config.data.val_fraction, now {config.data.get('val_fraction', 0.05)}, or prepare's "
            "--val_fraction)")


def corpus_documents(data_config, split: str = "train") -> Iterator[str]:
    """Raw document strings of `split` in source order (unshuffled, untokenised); for
    task=records:<dir>, the documents decoded from the records."""
    yield from sources.of(data_config).split_documents(data_config, split)
