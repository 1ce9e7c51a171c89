"""Packed, batched, exactly resumable batches from a seqio Task (optionally host-sharded).

The trainer reads the global stream (host_count=1) on every process, so the batches and the state
do not depend on the process count; host_index/host_count split the documents for other uses.

Order. Epoch e of a split is this host's share of the documents in a order fixed by (data.seed, e):
an in-memory corpus is fully permuted; a tfds corpus reads its files in a seeded order through a
seeded shuffle buffer. Hosts take disjoint shares (files when there are enough, else every
host_count-th document), so the union over hosts is the whole split with no overlap.

Packing. Each host concatenates its documents (tokens + EOS) and cuts the stream into rows of t
tokens; a document that does not fit is continued at the start of the next row as a new segment.
Segment ids number the pieces of a row from 1 (0 = padding, only at the end of a finite eval pass);
the input at a segment's first position is vocab.pad_id (the T5/seqio shifted convention), so every segment is self-contained.

Batch (numpy, per host, b = train.batch_size // host_count, t = train.seq_len):
  inputs [b,t] int32, targets [b,t] int32, segment_ids [b,t] int32,
  weights [b,t] float32 (1 where segment_ids > 0).

Tokens. Documents come raw from the Task's source; the Task's tokenize + append-EOS steps run here
in Python with the Task's vocabulary (identical ids, checked by the tests): a tf.data tokenising
stage added seconds of first-batch latency on 2 cores and would tokenise every skipped document on
resume.

State. The position after a batch is (epoch, doc, offset): the next token is token `offset` of
document `doc` of epoch `epoch`. set_state rebuilds that epoch's document stream and skips `doc`
raw documents: a list slice for in-memory corpora (stdlib, files), tf.data skip (reading, not
tokenising) for tfds corpora.
"""

from __future__ import annotations

import logging
from typing import Iterator

import numpy as np

from linscale_jax.data._tf import dataset_options, seqio
from linscale_jax.data.corpora import InMemorySource
from linscale_jax.data.errors import DataError

STATE_KEYS = ("task", "split", "seed", "shuffle", "host_index", "host_count")


def epoch_seed(seed: int, epoch: int) -> int:
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def raw_documents(task: seqio.Task, split: str, *, shuffle: bool, seed: int, host_index: int,
                  host_count: int, skip: int = 0) -> Iterator[str]:
    """One pass over this host's share of the Task's source documents (raw text), from document `skip`."""
    source = task.source
    if isinstance(source, InMemorySource):  # a Python list: order and skip without TensorFlow
        yield from source.ordered_texts(split, shuffle, seed)[host_index::host_count][skip:]
        return
    if host_count > 1 and len(source.list_shards(split)) >= host_count:  # whole files per host
        ds = source.get_dataset(split=split, shuffle=shuffle, seed=seed,
                                shard_info=seqio.ShardInfo(host_index, host_count))
    else:
        ds = source.get_dataset(split=split, shuffle=shuffle, seed=seed)
        if host_count > 1:
            ds = ds.shard(host_count, host_index)
    if shuffle:
        ds = ds.shuffle(task.shuffle_buffer_size, seed=seed)
    key = task_text_key(task)
    ds = ds.map(lambda ex: ex[key]).skip(skip).with_options(dataset_options()).prefetch(64)
    for n, text in enumerate(ds.as_numpy_iterator(), skip):
        try:
            yield text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"document {n} of {task.name}/{split} (host {host_index}) is not valid UTF-8 at byte "
                            f"offset {e.start}; re-prepare the tfds dataset with UTF-8 text") from None


def task_text_key(task: seqio.Task) -> str:
    """The source feature the Task's rekey preprocessor turns into "targets"."""
    return task.preprocessors[0].keywords["key_map"]["targets"]


def tokenizer(vocab: seqio.Vocabulary):
    """str -> int32 [t_doc] token ids with EOS appended: the Task's tokenize + EOS, run in Python.

    Equal to the Task's own preprocessing (tests check it) but without a tf.data stage, which adds
    seconds of first-batch latency and makes resuming cost tokenisation of every skipped document.
    """
    eos = np.array([vocab.eos_id], np.int32)
    if isinstance(vocab, seqio.ByteVocabulary):
        offset = vocab._num_special_tokens  # pad, eos, unk come before the 256 byte ids

        def encode(text: str) -> np.ndarray:
            return np.concatenate([np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32) + offset, eos])
    else:

        def encode(text: str) -> np.ndarray:
            return np.concatenate([np.asarray(vocab.encode(text), np.int32), eos])
    return encode


class DataIterator:
    """Infinite (or, with repeat=False, single-pass) iterator of packed batches; see module docstring."""

    def __init__(self, task: seqio.Task, *, split: str, batch_size: int, seq_len: int, seed: int,
                 host_index: int = 0, host_count: int = 1, shuffle: bool = True, repeat: bool = True):
        self.task, self.split, self.batch_size, self.seq_len = task, split, batch_size, seq_len
        self.seed, self.shuffle, self.repeat = seed, shuffle, repeat
        self.host_index, self.host_count = host_index, host_count
        vocab = task.output_features["targets"].vocabulary
        self.pad_id = vocab.pad_id
        self._encode = tokenizer(vocab)
        if isinstance(task.source, InMemorySource):
            task.source.texts(split)  # fail now on missing, empty or non-UTF-8 input, not at the first batch
        self._epoch, self._doc, self._offset, self._batches = 0, 0, 0, 0
        self._stream: Iterator[np.ndarray] | None = None
        self._current: np.ndarray | None = None  # tokens of document self._doc, if loaded
        self._epoch_has_docs = False
        self._stream_from_start = False

    def __iter__(self):
        return self

    def get_state(self) -> dict:
        """JSON-serialisable position after the last batch returned."""
        return dict(epoch=self._epoch, doc=self._doc, offset=self._offset, batches=self._batches,
                    task=self.task.name, split=self.split, seed=self.seed, shuffle=self.shuffle,
                    host_index=self.host_index, host_count=self.host_count)

    def set_state(self, state: dict) -> None:
        """Continue exactly after the batch at which `state` was taken (batch size and length may differ)."""
        mine = self.get_state()
        diff = {k: (state.get(k), mine[k]) for k in STATE_KEYS if state.get(k) != mine[k]}
        if diff:
            raise DataError(
                f"data iterator state does not match this iterator (saved, current): {diff}; resume with the "
                "same data.task/vocab/seed and host layout as the run that saved it"
            )
        self._epoch, self._doc, self._offset = int(state["epoch"]), int(state["doc"]), int(state["offset"])
        self._batches = int(state.get("batches", 0))
        self._stream, self._current = None, None

    def _remaining(self) -> np.ndarray | None:
        """Unconsumed tokens of the current document, loading the next non-empty one; None at the end."""
        while self._current is None:
            if self._stream is None:
                texts = raw_documents(
                    self.task, self.split, shuffle=self.shuffle, seed=epoch_seed(self.seed, self._epoch),
                    host_index=self.host_index, host_count=self.host_count, skip=self._doc)
                self._stream = map(self._encode, texts)
                self._stream_from_start, self._epoch_has_docs = self._doc == 0, False
            doc = next(self._stream, None)
            if doc is None:  # end of the epoch
                if self._stream_from_start and not self._epoch_has_docs:
                    raise DataError(
                        f"host {self.host_index} of {self.host_count} gets no non-empty documents from the "
                        f"{self.split} split of task {self.task.name}; add data or use fewer hosts"
                    )
                if not self.repeat:
                    return None
                self._epoch, self._doc, self._offset, self._stream = self._epoch + 1, 0, 0, None
            elif len(doc) <= 1:  # empty document: only EOS
                self._doc += 1
            else:
                self._current, self._epoch_has_docs = doc, True
        return self._current[self._offset:]

    def _consume(self, n: int) -> None:
        self._offset += n
        if self._offset == len(self._current):
            self._current, self._doc, self._offset = None, self._doc + 1, 0

    def __next__(self) -> dict:
        b, t = self.batch_size, self.seq_len
        targets = np.full((b, t), self.pad_id, np.int32)
        segment_ids = np.zeros((b, t), np.int32)
        starts = np.zeros((b, t), bool)  # first position of each segment
        filled = 0
        for row in range(b):
            col, segment = 0, 0
            while col < t:
                tokens = self._remaining()
                if tokens is None:
                    break
                n = min(t - col, len(tokens))
                segment += 1
                targets[row, col:col + n] = tokens[:n]
                segment_ids[row, col:col + n] = segment
                starts[row, col] = True
                self._consume(n)
                col += n
                filled += n
        if filled == 0:
            raise StopIteration
        inputs = np.empty_like(targets)
        inputs[:, 1:] = targets[:, :-1]
        inputs[starts | (segment_ids == 0)] = self.pad_id  # segment starts and padding
        self._batches += 1
        return dict(inputs=inputs, targets=targets, segment_ids=segment_ids,
                    weights=(segment_ids > 0).astype(np.float32))


def host_batch_size(batch_size: int, host_count: int, host_index: int) -> int:
    if not 0 <= host_index < host_count:
        raise DataError(f"host_index={host_index} is outside [0, host_count={host_count})")
    if batch_size % host_count:
        raise DataError(
            f"train.batch_size={batch_size} is not divisible by host_count={host_count}; "
            f"set --config.train.batch_size to a multiple of {host_count}"
        )
    return batch_size // host_count


def check_model_vocab(config, vocab) -> None:
    """Token ids must index the model's embedding: model.vocab_size >= vocab.vocab_size."""
    model = config.get("model")
    if model is not None and model.get("vocab_size", vocab.vocab_size) < vocab.vocab_size:
        raise DataError(
            f"model.vocab_size={model.vocab_size} is smaller than the {config.data.vocab!r} vocabulary "
            f"({vocab.vocab_size} ids); set --config.model.vocab_size={vocab.vocab_size}"
        )


def warn_short(batches: list, num_batches: int, task_name: str, split: str) -> None:
    if len(batches) < num_batches:
        logging.warning("%s/%s holds only %d of the %d eval batches requested", task_name, split,
                        len(batches), num_batches)
