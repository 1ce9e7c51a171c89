"""Data: seqio Tasks, vocabularies, and packed, host-sharded, exactly resumable batches.

  vocab = data.get_vocabulary(config.data)                 # seqio.Vocabulary; vocab.vocab_size
  it = data.make_iterator(config, split="train")            # the global batches (what training reads)
  batch = next(it)   # numpy [b, t] with b = train.batch_size // host_count, t = train.seq_len:
                     #   inputs, targets, segment_ids (0 = padding), weights (float32)
  state = it.get_state(); it.set_state(state)              # JSON-serialisable, exact resume
  data.eval_batches(config, split="validation", num_batches=N)   # fixed list of batches
  data.corpus_documents(config.data, split)                # raw document strings

Multi-process training reads the global iterator (host_count=1) on every process and each process
copies the shards of its devices (sharding.global_batch): the batch of step s and the iterator
state are then independent of the number of processes. host_index/host_count give disjoint
per-host document shares for other uses.
Config (config.data): task (stdlib | files | tfds:<name> | mqar: synthetic recall, see data.mqar),
vocab (byte | sentencepiece:<path> | cl100k_base), paths, text_key, txt_document, tfds_data_dir,
tiktoken_file, val_fraction, seed.
Importing this package imports TensorFlow (CPU only, 2 threads) and registers the default Tasks.
"""

from __future__ import annotations

from typing import Iterator

from linscale_jax.data import corpora, pipeline, tasks
from linscale_jax.data.errors import DataError
from linscale_jax.data.pipeline import DataIterator
from linscale_jax.data.tasks import get_task
from linscale_jax.data.vocab import get_vocabulary

__all__ = ["DataError", "DataIterator", "corpus_documents", "eval_batches", "get_task", "get_vocabulary",
           "make_iterator"]

tasks.register_defaults()


def make_iterator(config, split: str = "train", host_index: int = 0, host_count: int = 1) -> DataIterator:
    """Infinite deterministic iterator of this host's packed batches (order fixed by config.data.seed)."""
    b = pipeline.host_batch_size(config.train.batch_size, host_count, host_index)
    if config.data.task == "mqar":
        from linscale_jax.data import mqar

        return mqar.make_iterator(config, split, b, host_index, host_count)
    task = get_task(config.data)
    pipeline.check_model_vocab(config, task.output_features["targets"].vocabulary)
    return DataIterator(task, split=split, batch_size=b, seq_len=config.train.seq_len, seed=config.data.seed,
                        host_index=host_index, host_count=host_count)


def eval_batches(config, split: str = "validation", num_batches: int = 4, host_index: int = 0,
                 host_count: int = 1) -> list[dict]:
    """The first `num_batches` batches of one pass over `split` (fewer if the split is short).

    In-memory corpora (listed sorted by path) are read in the fixed permutation of data.seed, so a
    few batches sample the whole split; tfds splits are read in their stored order.
    """
    b = pipeline.host_batch_size(config.train.batch_size, host_count, host_index)
    if config.data.task == "mqar":
        from linscale_jax.data import mqar

        it = mqar.make_iterator(config, split, b, host_index, host_count)
        return [next(it) for _ in range(num_batches)]
    task = get_task(config.data)
    pipeline.check_model_vocab(config, task.output_features["targets"].vocabulary)
    it = DataIterator(task, split=split, batch_size=b, seq_len=config.train.seq_len, seed=config.data.seed,
                      host_index=host_index, host_count=host_count,
                      shuffle=isinstance(task.source, corpora.InMemorySource), repeat=False)
    batches = [batch for batch, _ in zip(it, range(num_batches))]
    pipeline.warn_short(batches, num_batches, task.name, split)
    return batches


def corpus_documents(data_config, split: str = "train") -> Iterator[str]:
    """Raw document strings of `split` in source order (unshuffled, untokenised)."""
    source = get_task(data_config).source
    if isinstance(source, corpora.InMemorySource):
        yield from source.texts(split)
        return
    text_key = tasks.text_key(data_config)
    for example in source.get_dataset(split=split, shuffle=False).as_numpy_iterator():
        yield example[text_key].decode("utf-8")
