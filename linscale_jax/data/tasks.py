"""seqio Tasks for every text source, one per (source, vocabulary, source options).

`get_task(data_config)` registers a Task on first use: linscale_<source> for the byte vocabulary and
default options (linscale_stdlib, linscale_files, linscale_c4, linscale_tfds_<name>, ...), with the
vocabulary's tag and a short hash of the other options otherwise.

Every Task maps a document to {"targets": int32 [t]}: rekey the text field, then tokenize with the
vocabulary and append EOS (one sequential map). The examples come from the source's own seqio
source (tfds) or, for a source without one, from its `split_documents` held in memory
(data.sources). Training reads prepared records instead, tokenised by data.tokenize with the same
ids (tests check it).
"""

from __future__ import annotations

import functools
import hashlib
import os

import numpy as np

from linscale_jax.data import corpora, sources
from linscale_jax.data._tf import seqio, tf
from linscale_jax.data.vocab import cl100k_file, get_vocabulary, vocab_key

DEFAULTS = dict(text_key="text", txt_document="paragraph", val_fraction=0.05, tfds_data_dir="", paths="")


class InMemorySource(seqio.FunctionDataSource):
    """seqio source over the documents of a source held in memory: {"text": str} per document.

    Shuffling is a full permutation of the split drawn from the seed.
    """

    def __init__(self, texts):
        self.texts = texts  # split -> list of texts, called lazily (listing costs I/O)
        super().__init__(dataset_fn=self._dataset_fn, splits=corpora.SPLITS, caching_permitted=False)
        self._performs_internal_shuffling = True

    def num_input_examples(self, split: str) -> int:
        return len(self.texts(split))

    def _dataset_fn(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
        texts = self.texts(split)
        if shuffle_files:
            texts = [texts[i] for i in np.random.default_rng(seed or 0).permutation(len(texts))]
        return tf.data.Dataset.from_tensor_slices({"text": tf.constant(texts, tf.string)})

    def get_dataset(self, split="train", shuffle=True, seed=None, shard_info=None, **unused):
        if shard_info and shard_info.num_shards > 1:
            raise ValueError("InMemorySource shards examples: use tf.data.Dataset.shard")
        return self._dataset_fn(split=split, shuffle_files=shuffle, seed=seed)


def _options(data_config) -> dict:
    return {k: data_config.get(k, v) for k, v in DEFAULTS.items()}


def task_name(data_config) -> str:
    """Registry name of the Task for `data_config` (validates data.task and data.vocab)."""
    src, vocab = sources.of(data_config), vocab_key(data_config.vocab)
    opts = _options(data_config)
    name = f"linscale_{src.task_tag(data_config)}" + ("" if vocab == "byte" else f"_{vocab}")
    extra = {k: opts[k] for k in ("val_fraction", *src.options) if opts.get(k, "") != DEFAULTS.get(k, "")}
    if vocab == "cl100k_base":  # the resolved BPE file is part of the vocabulary's identity
        extra["tiktoken_file"] = os.path.abspath(cl100k_file(data_config))
    if extra:
        name += "_" + hashlib.sha1(repr(sorted(extra.items())).encode()).hexdigest()[:10]
    return name


def get_task(data_config) -> seqio.Task:
    """The registered seqio.Task for `data_config`, registering it on first use."""
    name = task_name(data_config)
    src = sources.of(data_config)
    source = src.seqio_source(data_config) if src.seqio_source else None  # checks a tfds dataset is there
    if name not in seqio.TaskRegistry.names():
        texts = functools.partial(_texts, src, data_config)
        seqio.TaskRegistry.add(
            name,
            source=source or InMemorySource(texts),
            preprocessors=[
                functools.partial(seqio.preprocessors.rekey, key_map={"targets": src.text_key(data_config)}),
                tokenize_with_eos,
            ],
            output_features={"targets": seqio.Feature(get_vocabulary(data_config), add_eos=True, dtype=tf.int32)},
            shuffle_buffer_size=None if source is None else 10_000,
        )
    return seqio.get_mixture_or_task(name)


def _texts(src, data_config, split: str) -> list[str]:
    return list(src.split_documents(data_config, split))


@seqio.map_over_dataset
def _tokenize_example(example, output_features):
    vocab = output_features["targets"].vocabulary
    ids = vocab.encode_tf(example["targets"])
    return {"targets": tf.concat([tf.cast(ids, tf.int32), [vocab.eos_id]], axis=0)}


def tokenize_with_eos(dataset: tf.data.Dataset, output_features) -> tf.data.Dataset:
    """seqio tokenize + append_eos in one sequential map (chained parallel maps delay the first example)."""
    return _tokenize_example(dataset, output_features=output_features)
