"""Data sources: one `Source` per kind of `data.task`, and the table of what callers ask it.

  src = sources.of(config.data)          # the Source of data.task (DataError naming the forms if unknown)
  src.argument(config.data)              # what follows "<name>:" (the tfds name, the records dir)
  src.documents(data, shard, shards)     # prepare's stream: (split, text, fraction done or None)
  src.split_documents(data, split)       # the raw texts of one split, in source order
  src.description(data)                  # the options that decide the documents (dataset.json)

  source   data.task                  documents                           rows
  stdlib   stdlib                     the Python stdlib's pieces          records, prepared on first use
  files    files (data.paths)         .txt/.jsonl[.gz|.zst]/.parquet      records, prepared on first use
  tfds     tfds:<name>[:<version>]    a tfds dataset's splits             records, prepared on first use
  records  records:<prepared dir>     decoded from the records            the records (`prepare` wrote)
  mqar     mqar                       none: synthetic                     MQARRows (data.mqar)

The validation split: stdlib and files hold out the documents whose id hashes below
data.val_fraction (data.corpora); tfds uses the dataset's own split or carves the last
data.val_fraction of train (data.tfds_corpus); records read their prepared validation split; mqar
draws it from its own seed stream. The fingerprint of every text source is that of its prepared
records (data.records.fingerprint); mqar's rows are a function of data.seed and data.mqar.

The fields answer what callers would otherwise branch on (`paths`, `prepared`, `parallel`,
`rows`, ...), so a new source is one entry of SOURCES plus its reader (a `documents` stream and a
`split_documents` function); preparing, packing, the records, the rows of each global batch, the
seqio Task and the cache follow from them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import sysconfig
from typing import Callable

from linscale_jax.data import corpora, records, tfds_corpus
from linscale_jax.data.errors import DataError


@dataclasses.dataclass(frozen=True)
class Source:
    """One kind of data.task (see the module docstring); the callables take the data config."""

    name: str  # data.task, or its prefix before ":" when `form` takes an argument
    form: str  # how data.task names it
    options: tuple[str, ...] = ()  # the data.* fields that decide its documents (with val_fraction)
    paths: bool = False  # the documents come from data.paths (what `prepare --input=FILES` means)
    prepared: bool = False  # data.task names records `prepare` wrote: nothing to prepare
    parallel: bool = False  # prepared on first use by several processes whatever the input size
    piece_chars: int = 0  # documents are cut into pieces of about this many characters (0: whole)
    documents_fn: Callable | None = None  # (data, shard, shards) -> (split, text, fraction done or None)
    split_fn: Callable | None = None  # (data, split) -> texts of one split
    stamp: Callable = lambda data: []  # cheap identity of the inputs' content (paths, sizes, mtimes)
    input_bytes: Callable = lambda data: 0  # size of the inputs (how many processes prepare them)
    seqio_source: Callable | None = None  # (data) -> its own seqio DataSource (else an in-memory one)
    text_key: Callable = lambda data: "text"  # the text feature of the seqio source's examples
    tag: Callable | None = None  # (data) -> a short name for seqio Task names (default: name)
    rows: Callable | None = None  # (config, split) -> synthetic row source (None: prepared records)

    @property
    def takes_argument(self) -> bool:
        return ":" in self.form

    def argument(self, data) -> str:
        return data.task.partition(":")[2]

    def documents(self, data, shard: int = 0, shards: int = 1):
        if self.documents_fn is None:
            raise DataError(f"data.task={data.task!r} has no documents to prepare; prepare reads "
                            f"{', '.join(s.form for s in SOURCES.values() if s.documents_fn)}")
        return self.documents_fn(data, shard, shards)

    def split_documents(self, data, split: str):
        if self.split_fn is None:
            raise DataError(f"data.task={data.task!r} is synthetic: it has no documents; use a text source "
                            f"({', '.join(s.form for s in SOURCES.values() if s.split_fn)})")
        return self.split_fn(data, split)

    def description(self, data) -> dict:
        """The options that decide the documents (stored in dataset.json and in cache keys)."""
        d = dict(task=data.task, val_fraction=float(data.val_fraction), **{k: data.get(k, "") for k in self.options})
        if self.piece_chars:
            d["piece_chars"] = self.piece_chars
        return d

    def task_tag(self, data) -> str:
        return self.tag(data) if self.tag else self.name


def _files_corpus(data):
    return corpora.files_corpus(data.paths, data.text_key, data.txt_document)


def _stdlib_stamp(data) -> list:
    return [sysconfig.get_paths()["stdlib"], sys.version]


def _files_stamp(data) -> list:
    return [(f, os.path.getsize(f), os.stat(f).st_mtime_ns) for f in corpora.expand_paths(data.paths)]


def _mqar_rows(config, split):
    from linscale_jax.data import mqar

    return mqar.MQARRows(config, split)


STDLIB = Source(
    "stdlib", "stdlib", piece_chars=corpora.STDLIB_PIECE_CHARS,
    documents_fn=lambda d, shard, shards: corpora.stream_stdlib(d.val_fraction, shard, shards),
    split_fn=lambda d, split: corpora.split_pieces(corpora.stdlib_corpus(), split, d.val_fraction,
                                                   corpora.STDLIB_PIECE_CHARS),
    stamp=_stdlib_stamp)
FILES = Source(
    "files", "files", options=("paths", "text_key", "txt_document"), paths=True,
    documents_fn=lambda d, shard, shards: corpora.stream_files(d.paths, d.text_key, d.txt_document,
                                                               d.val_fraction, shard, shards),
    split_fn=lambda d, split: corpora.split_pieces(_files_corpus(d), split, d.val_fraction),
    stamp=_files_stamp,
    input_bytes=lambda d: sum(os.path.getsize(f) for f in corpora.expand_paths(d.paths)))
TFDS = Source(
    "tfds", f"tfds:<name>[:<version>] (aliases: {', '.join(f'tfds:{a}' for a in tfds_corpus.PUBLIC_TFDS)})",
    options=("tfds_data_dir", "text_key"), parallel=True,
    documents_fn=lambda d, shard, shards: tfds_corpus.documents(d, TFDS.argument(d), shard, shards),
    split_fn=lambda d, split: tfds_corpus.split_documents(d, TFDS.argument(d), split),
    stamp=lambda d: [tfds_corpus.tfds_name(TFDS.argument(d))],
    seqio_source=lambda d: tfds_corpus.source(d, TFDS.argument(d)),
    text_key=lambda d: tfds_corpus.text_key(d, TFDS.argument(d)),
    tag=lambda d: tfds_corpus.tag(TFDS.argument(d)))
RECORDS = Source(
    "records", "records:<prepared dir>", prepared=True,
    split_fn=lambda d, split: records.documents(RECORDS.argument(d), split, d.get("tiktoken_file", "")))
MQAR = Source("mqar", "mqar", rows=_mqar_rows)

SOURCES = {s.name: s for s in (STDLIB, FILES, TFDS, RECORDS, MQAR)}
FORMS = " | ".join(s.form for s in SOURCES.values())


@functools.lru_cache(maxsize=None)
def parse(task: str) -> Source:
    """The Source of a data.task value; DataError naming the forms when there is none."""
    name, sep, arg = str(task).partition(":")
    src = SOURCES.get(name)
    if src is None or bool(sep) != src.takes_argument or (sep and not arg):
        raise DataError(f"unknown data.task={task!r}; use one of: {FORMS}")
    return src


def of(data) -> Source:
    """The Source of data.task."""
    return parse(data.task)


def input_task(text: str) -> tuple[str, str]:
    """(data.task, data.paths) of a corpus named on a command line (prepare --input, train_spm
    --corpus): a source that reads documents by name (stdlib, tfds:<name>), else files and globs."""
    try:
        src = parse(text)
    except DataError:
        return FILES.name, text
    if src.paths:
        return FILES.name, text
    if src.documents_fn is None:
        raise DataError(f"{text!r} is not a corpus to prepare; name one of: "
                        f"{', '.join(s.form for s in SOURCES.values() if s.documents_fn and not s.paths)}, "
                        "or files, directories and globs")
    return text, ""
