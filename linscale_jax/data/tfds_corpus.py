"""tfds corpora (data.task=tfds:<name>[:<version>]): names, splits, and their documents.

  tfds_corpus.documents(data_config, name, shard, shards)   # prepare's stream: (split, text, None)
  tfds_corpus.split_documents(data_config, name, split)      # the texts of one split, in order
  tfds_corpus.source(data_config, name)                       # the seqio.TfdsDataSource (read-only)

Aliases (PUBLIC_TFDS): c4, wikipedia, pg19, lm1b name a versioned tfds dataset, its text field and
its splits; any other name needs a version and reads data.text_key. A dataset without a validation
split holds out the last data.val_fraction of train (whole percents). Datasets are read from the
tfds data dir (data.tfds_data_dir, $TFDS_DATA_DIR, ~/tensorflow_datasets), never downloaded.
Importing this module does not import TensorFlow; its functions do.
"""

from __future__ import annotations

import functools
import os
from typing import Iterator

from linscale_jax.data.errors import DataError

SPLITS = ("train", "validation")
# alias -> (tfds name, text field, {our split: tfds split}; None = carve validation from train)
PUBLIC_TFDS = {
    "c4": ("c4/en:3.1.0", "text", {"train": "train", "validation": "validation"}),
    "wikipedia": ("wikipedia/20230601.en:1.0.0", "text", None),
    "pg19": ("pg19:0.1.1", "book_text", {"train": "train", "validation": "validation"}),
    "lm1b": ("lm1b:1.1.0", "text", {"train": "train", "validation": "test"}),
}


def tfds_name(name: str) -> str:
    """The versioned tfds name of tfds:<name> (aliases resolved)."""
    if name in PUBLIC_TFDS:
        return PUBLIC_TFDS[name][0]
    if ":" not in name:
        raise DataError(f"data.task='tfds:{name}' needs a version: tfds:<name>:<version>, e.g. tfds:c4/en:3.1.0")
    return name


def tag(name: str) -> str:
    """A short name for seqio Task names: the alias, else tfds_<name with _ for punctuation>."""
    return name if name in PUBLIC_TFDS else "tfds_" + "".join(c if c.isalnum() else "_" for c in name)


def text_key(data_config, name: str) -> str:
    """The raw-text feature of the dataset's examples."""
    return PUBLIC_TFDS[name][1] if name in PUBLIC_TFDS else data_config.get("text_key", "text")


def data_dir(data_config) -> str:
    return data_config.get("tfds_data_dir", "") or os.environ.get("TFDS_DATA_DIR") or \
        os.path.expanduser("~/tensorflow_datasets")


@functools.lru_cache(maxsize=None)
def check_prepared(tfds_id: str, root: str) -> None:
    """Raise DataError naming the data dir and the build command unless the dataset is on disk."""
    import tensorflow_datasets as tfds

    build = f"tfds build {tfds_id.split(':')[0]} --data_dir={root}"
    try:
        prepared = tfds.builder(tfds_id, data_dir=root).is_prepared()
    except Exception as e:  # noqa: BLE001 - unknown name or version
        raise DataError(
            f"tfds dataset {tfds_id!r} is not available under {root} ({type(e).__name__}: {e}). "
            f"Prepare it once with `{build}` and set --config.data.tfds_data_dir={root}."
        ) from None
    if not prepared:
        raise DataError(
            f"tfds dataset {tfds_id!r} is not prepared under {root}. Prepare it once with `{build}` "
            f"(large corpora such as C4 need Apache Beam) and set --config.data.tfds_data_dir={root}."
        )


def _has_validation(tfds_id: str, root: str) -> bool:
    import tensorflow_datasets as tfds

    try:
        return "validation" in tfds.builder(tfds_id, data_dir=root).info.splits
    except Exception:  # noqa: BLE001 - not prepared: check_prepared reports that with the build command
        return False


def _carve(val_fraction: float) -> dict:
    """Hold out the last val_fraction of train (tfds slices take whole percents, at least 1%)."""
    pct = max(1, round(100 * val_fraction))
    return {"train": f"train[:{100 - pct}%]", "validation": f"train[{100 - pct}%:]"}


def source(data_config, name: str):
    """The seqio.TfdsDataSource of tfds:<name> (checked prepared first)."""
    tfds_id, given = tfds_name(name), data_config.get("tfds_data_dir", "") or None
    check_prepared(tfds_id, data_dir(data_config))
    return _source(name, tfds_id, given, float(data_config.get("val_fraction", 0.05)))


@functools.lru_cache(maxsize=None)
def _source(name: str, tfds_id: str, given_dir, val_fraction: float):
    from linscale_jax.data._tf import seqio

    splits = PUBLIC_TFDS.get(name, (None, None, None))[2]
    if splits is None:
        has_val = name not in PUBLIC_TFDS and _has_validation(tfds_id, given_dir)
        splits = {"train": "train", "validation": "validation"} if has_val else _carve(val_fraction)
    return seqio.TfdsDataSource(tfds_id, tfds_data_dir=given_dir, splits=splits, read_only=True)


def _texts(ds, key: str, what: str) -> Iterator[str]:
    from linscale_jax.data._tf import dataset_options

    for n, ex in enumerate(ds.map(lambda ex: ex[key]).with_options(dataset_options()).prefetch(64)
                           .as_numpy_iterator()):
        try:
            yield ex.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"document {n} of {what} is not valid UTF-8 at byte offset {e.start}; re-prepare the "
                            "tfds dataset with UTF-8 text") from None


def split_documents(data_config, name: str, split: str) -> Iterator[str]:
    ds = source(data_config, name).get_dataset(split=split, shuffle=False)
    yield from _texts(ds, text_key(data_config, name), f"tfds:{name}/{split}")


def documents(data_config, name: str, shard: int = 0, shards: int = 1) -> Iterator[tuple]:
    """(split, text, None) of host shard `shard` of `shards`: whole tfds file shards when there are
    at least `shards`, else every shards-th example (what prepare reads)."""
    from linscale_jax.data._tf import seqio

    src = source(data_config, name)
    for split in SPLITS:
        if shards > 1 and len(src.list_shards(split)) >= shards:
            ds = src.get_dataset(split=split, shuffle=False, shard_info=seqio.ShardInfo(shard, shards))
        else:
            ds = src.get_dataset(split=split, shuffle=False)
            if shards > 1:
                ds = ds.shard(shards, shard)
        for text in _texts(ds, text_key(data_config, name), f"tfds:{name}/{split}"):
            yield split, text, None
