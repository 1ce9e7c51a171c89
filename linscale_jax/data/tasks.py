"""seqio Tasks for every corpus, one per (corpus, vocabulary, corpus options).

Registered when this module is imported (byte vocabulary, default options):
  linscale_stdlib                 the embedded default corpus (corpora.stdlib_corpus)
  linscale_c4, linscale_wikipedia, linscale_pg19, linscale_lm1b
                                  tfds corpora (read from the tfds data dir; never downloaded)
Other combinations (a SentencePiece or cl100k vocabulary, local files, a tfds data dir, another
val_fraction) are registered on first use by `get_task(data_config)` under a name with a short hash.

Every Task maps a document to {"targets": int32 [t]}: rekey the text field, then tokenize with the
vocabulary and append EOS (one sequential map). Training reads prepared records instead, tokenised by
data.tokenize with the same ids (tests check it); `prepare` reads tfds corpora through these Tasks.
"""

from __future__ import annotations

import functools
import hashlib
import os

import numpy as np

from linscale_jax.data import corpora
from linscale_jax.data._tf import seqio, tf
from linscale_jax.data.errors import DataError
from linscale_jax.data.vocab import cl100k_file, get_vocabulary, vocab_key

TASK_FORMS = ("stdlib | files | tfds:<name>[:<version>] (aliases: tfds:c4, tfds:wikipedia, tfds:pg19, tfds:lm1b) | "
              "records:<prepared dir> | mqar")
# alias -> (tfds name, text field, {our split: tfds split}; None = carve validation from train)
PUBLIC_TFDS = {
    "c4": ("c4/en:3.1.0", "text", {"train": "train", "validation": "validation"}),
    "wikipedia": ("wikipedia/20230601.en:1.0.0", "text", None),
    "pg19": ("pg19:0.1.1", "book_text", {"train": "train", "validation": "validation"}),
    "lm1b": ("lm1b:1.1.0", "text", {"train": "train", "validation": "test"}),
}
DEFAULTS = dict(text_key="text", txt_document="paragraph", val_fraction=0.05, tfds_data_dir="", paths="")


class InMemorySource(seqio.FunctionDataSource):
    """seqio source over an in-memory corpus: {"text": str} per document.

    Shuffling is a full permutation of the split drawn from the seed. With piece_chars > 0 the
    examples are the `corpora.pieces` of the split's documents (the split itself is decided per
    document, so no document has pieces on both sides).
    """

    def __init__(self, load_corpus, val_fraction: float, piece_chars: int = 0):
        self._load_corpus = load_corpus  # () -> Corpus, called lazily (listing costs I/O)
        self._val_fraction = val_fraction
        self._piece_chars = piece_chars
        super().__init__(dataset_fn=self._dataset_fn, splits=corpora.SPLITS, caching_permitted=False)
        self._performs_internal_shuffling = True

    def texts(self, split: str) -> list[str]:
        texts = corpora.split_texts(self._load_corpus(), split, self._val_fraction)
        if self._piece_chars:
            texts = [p for t in texts for p in corpora.pieces(t, self._piece_chars)]
        return texts

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
    kind, vocab = data_config.task, vocab_key(data_config.vocab)
    opts = _options(data_config)
    if kind == "stdlib":
        corpus, relevant = "stdlib", ["val_fraction"]
    elif kind == "files":
        corpus, relevant = "files", ["paths", "text_key", "txt_document", "val_fraction"]
    elif kind.startswith("tfds:") and kind[5:]:
        name = kind[5:]
        corpus = name if name in PUBLIC_TFDS else "tfds_" + "".join(c if c.isalnum() else "_" for c in name)
        relevant = ["tfds_data_dir", "val_fraction"] + ([] if name in PUBLIC_TFDS else ["text_key"])
    else:
        raise DataError(f"unknown data.task={kind!r}; use one of: {TASK_FORMS}")
    name = f"linscale_{corpus}" + ("" if vocab == "byte" else f"_{vocab}")
    extra = {k: opts[k] for k in relevant if opts[k] != DEFAULTS[k]}
    if vocab == "cl100k_base":  # the resolved BPE file is part of the vocabulary's identity
        extra["tiktoken_file"] = os.path.abspath(cl100k_file(data_config))
    if extra:
        name += "_" + hashlib.sha1(repr(sorted(extra.items())).encode()).hexdigest()[:10]
    return name


def get_task(data_config) -> seqio.Task:
    """The registered seqio.Task for `data_config`, registering it on first use."""
    name = task_name(data_config)
    if data_config.task.startswith("tfds:"):
        check_tfds_prepared(tfds_name(data_config), _options(data_config)["tfds_data_dir"])
    if name not in seqio.TaskRegistry.names():
        _register(name, data_config)
    return seqio.get_mixture_or_task(name)


def tfds_name(data_config) -> str:
    """The versioned tfds name of a data.task='tfds:...' (aliases resolved)."""
    name = data_config.task[5:]
    if name in PUBLIC_TFDS:
        return PUBLIC_TFDS[name][0]
    if ":" not in name:
        raise DataError(f"data.task={data_config.task!r} needs a version: tfds:<name>:<version>, e.g. tfds:c4/en:3.1.0")
    return name


def text_key(data_config) -> str:
    """Name of the raw-text feature of the Task's source examples."""
    kind = data_config.task
    if kind.startswith("tfds:") and kind[5:] in PUBLIC_TFDS:
        return PUBLIC_TFDS[kind[5:]][1]
    return "text" if kind in ("stdlib", "files") else _options(data_config)["text_key"]


def _register(name: str, data_config) -> None:
    opts = _options(data_config)
    kind = data_config.task
    if kind == "stdlib":
        source = InMemorySource(corpora.stdlib_corpus, opts["val_fraction"], corpora.STDLIB_PIECE_CHARS)
    elif kind == "files":
        load = functools.partial(corpora.files_corpus, opts["paths"], opts["text_key"], opts["txt_document"])
        source = InMemorySource(load, opts["val_fraction"])
    else:
        tfds_id = tfds_name(data_config)
        splits = PUBLIC_TFDS.get(kind[5:], (None, None, None))[2]
        data_dir = opts["tfds_data_dir"] or None
        if splits is None:
            has_val = kind[5:] not in PUBLIC_TFDS and _tfds_has_validation(tfds_id, data_dir)
            splits = {"train": "train", "validation": "validation"} if has_val else _carve(opts["val_fraction"])
        source = seqio.TfdsDataSource(tfds_id, tfds_data_dir=data_dir, splits=splits, read_only=True)
    vocabulary = get_vocabulary(data_config)
    seqio.TaskRegistry.add(
        name,
        source=source,
        preprocessors=[
            functools.partial(seqio.preprocessors.rekey, key_map={"targets": text_key(data_config)}),
            tokenize_with_eos,
        ],
        output_features={"targets": seqio.Feature(vocabulary, add_eos=True, dtype=tf.int32)},
        shuffle_buffer_size=None if isinstance(source, InMemorySource) else 10_000,
    )


@seqio.map_over_dataset
def _tokenize_example(example, output_features):
    vocab = output_features["targets"].vocabulary
    ids = vocab.encode_tf(example["targets"])
    return {"targets": tf.concat([tf.cast(ids, tf.int32), [vocab.eos_id]], axis=0)}


def tokenize_with_eos(dataset: tf.data.Dataset, output_features) -> tf.data.Dataset:
    """seqio tokenize + append_eos in one sequential map (chained parallel maps delay the first example)."""
    return _tokenize_example(dataset, output_features=output_features)


def _tfds_has_validation(tfds_name: str, data_dir: str | None) -> bool:
    import tensorflow_datasets as tfds

    try:
        return "validation" in tfds.builder(tfds_name, data_dir=data_dir).info.splits
    except Exception:  # not prepared: get_task reports that with the build command
        return False


def _carve(val_fraction: float) -> dict:
    """Hold out the last val_fraction of train (tfds slices take whole percents, at least 1%)."""
    pct = max(1, round(100 * val_fraction))
    return {"train": f"train[:{100 - pct}%]", "validation": f"train[{100 - pct}%:]"}


@functools.lru_cache(maxsize=None)
def check_tfds_prepared(tfds_name: str, data_dir: str) -> None:
    """Raise DataError naming the data dir and the build command unless the dataset is on disk."""
    import tensorflow_datasets as tfds

    root = data_dir or os.environ.get("TFDS_DATA_DIR") or os.path.expanduser("~/tensorflow_datasets")
    build = f"tfds build {tfds_name.split(':')[0]} --data_dir={root}"
    try:
        prepared = tfds.builder(tfds_name, data_dir=root).is_prepared()
    except Exception as e:  # unknown name or version
        raise DataError(
            f"tfds dataset {tfds_name!r} is not available under {root} ({type(e).__name__}: {e}). "
            f"Prepare it once with `{build}` and set --config.data.tfds_data_dir={root}."
        ) from None
    if not prepared:
        raise DataError(
            f"tfds dataset {tfds_name!r} is not prepared under {root}. Prepare it once with `{build}` "
            f"(large corpora such as C4 need Apache Beam) and set --config.data.tfds_data_dir={root}."
        )


def register_defaults() -> None:
    """Register the default-option Tasks (byte vocabulary) for the stdlib and public tfds corpora."""
    import ml_collections

    for task in ["stdlib"] + [f"tfds:{alias}" for alias in PUBLIC_TFDS]:
        cfg = ml_collections.ConfigDict(dict(DEFAULTS, task=task, vocab="byte"))
        if task_name(cfg) not in seqio.TaskRegistry.names():
            _register(task_name(cfg), cfg)


register_defaults()
