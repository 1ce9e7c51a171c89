"""Raw documents of the in-memory corpora and their train/validation split.

  stdlib  the embedded default corpus: the *.py source files of the running Python's standard library
          (sysconfig.get_paths()["stdlib"]), without site-packages, test suites (test/, tests/,
          idle_test/: machine-dependent and full of deliberately malformed data), build/config
          leftovers and byte caches; files that are empty or not UTF-8 are skipped. Listing order
          is sorted by relative path. The split is by file; the documents the pipeline reads are
          the files' pieces (`pieces`, STDLIB_PIECE_CHARS): runs of whole lines of about 1 KB cut
          at blank lines, so a shuffled batch mixes code from many modules instead of spending
          dozens of consecutive steps inside one long file.
  files   local .txt / .jsonl files (data.paths: comma-separated files, directories or glob
          patterns). jsonl: one JSON object per line, text under data.text_key. txt: documents are
          blank-line separated paragraphs, lines, or whole files (data.txt_document).

Every document has a stable id (stdlib: relative path; files: "<file name>:<n>"); a document belongs
to the validation split when a hash of its id falls below data.val_fraction, so the split never
depends on listing order, seeds or machine.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import json
import os
import re
import sysconfig

import numpy as np

from linscale_jax.data._tf import seqio, tf
from linscale_jax.data.errors import DataError

SPLITS = ("train", "validation")
STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test", "lib-dynload"}
TXT_DOCUMENTS = ("paragraph", "line", "file")
STDLIB_PIECE_CHARS = 1024


@dataclasses.dataclass(frozen=True)
class Corpus:
    name: str  # human-readable origin, used in error messages
    ids: tuple[str, ...]
    texts: tuple[str, ...]


def is_validation(doc_id: str, val_fraction: float) -> bool:
    """Stable split membership: sha256 of the id as a number in [0, 1) compared to val_fraction."""
    h = int.from_bytes(hashlib.sha256(doc_id.encode("utf-8")).digest()[:8], "big")
    return h / 2.0**64 < val_fraction


def split_texts(corpus: Corpus, split: str, val_fraction: float) -> list[str]:
    """Texts of one split in listing order; raises DataError if the split is empty."""
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r} for {corpus.name}; use one of {SPLITS}")
    want_val = split == "validation"
    texts = [t for i, t in zip(corpus.ids, corpus.texts) if is_validation(i, val_fraction) == want_val]
    if not texts:
        raise DataError(
            f"the {split} split of {corpus.name} is empty ({len(corpus.ids)} documents, "
            f"data.val_fraction={val_fraction}); add documents or change data.val_fraction"
        )
    return texts


def pieces(text: str, size: int) -> list[str]:
    """Cut `text` into runs of whole lines: a piece ends at the first blank line once it holds
    >= `size` characters, or at any line end once it holds >= 4·`size`. "".join(pieces) == text."""
    out, current, n = [], [], 0
    for line in text.splitlines(keepends=True):
        current.append(line)
        n += len(line)
        if (n >= size and not line.strip()) or n >= 4 * size:
            out.append("".join(current))
            current, n = [], 0
    if current:
        out.append("".join(current))
    return out


@functools.lru_cache(maxsize=None)
def stdlib_corpus(root: str | None = None) -> Corpus:
    root = root or sysconfig.get_paths()["stdlib"]
    ids, texts = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in STDLIB_SKIP_DIRS and not d.startswith("config-"))
        for name in sorted(filenames):
            if not name.endswith(".py") or name.startswith("_sysconfigdata"):
                continue
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if text.strip():
                ids.append(os.path.relpath(path, root).replace(os.sep, "/"))
                texts.append(text)
    order = np.argsort(ids, kind="stable")  # sorted by relative path, independent of os.walk order
    if not ids:
        raise DataError(f"no Python sources found under the standard library directory {root}")
    return Corpus(f"the stdlib corpus ({root})", tuple(ids[i] for i in order), tuple(texts[i] for i in order))


def expand_paths(paths: str) -> list[str]:
    """data.paths (comma-separated files, directories, glob patterns) -> sorted existing files."""
    entries = [p.strip() for p in paths.split(",") if p.strip()]
    if not entries:
        raise DataError("data.task='files' needs data.paths: comma-separated .txt/.jsonl files, dirs or globs")
    files, missing = [], []
    for entry in entries:
        entry = os.path.expanduser(entry)
        if os.path.isdir(entry):
            found = [p for ext in ("txt", "jsonl") for p in glob.glob(os.path.join(entry, "**", f"*.{ext}"), recursive=True)]
        elif any(c in entry for c in "*?["):
            found = glob.glob(entry, recursive=True)
        else:
            found = [entry] if os.path.isfile(entry) else []
        (files.extend(sorted(found)) if found else missing.append(entry))
    if missing:
        raise DataError(f"data files not found: {missing}; fix data.paths (comma-separated files, directories or globs)")
    for f in files:
        if not f.endswith((".txt", ".jsonl")):
            raise DataError(f"{f}: unsupported file type; data.paths takes .txt and .jsonl files")
    return files


def read_utf8(path: str) -> str:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(
            f"{path}: not valid UTF-8 at byte offset {e.start} (line {line}, bytes {raw[e.start:e.start + 4]!r}). "
            "Convert the file to UTF-8 (e.g. `iconv -f latin1 -t utf-8 IN > OUT`) or remove it from data.paths."
        ) from None


def file_documents(path: str, text_key: str, txt_document: str) -> list[str]:
    text = read_utf8(path)
    if path.endswith(".jsonl"):
        docs = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{n} is not valid JSON ({e.msg}); each line must be one JSON object") from None
            if not isinstance(record, dict) or not isinstance(record.get(text_key), str):
                raise DataError(f"{path}:{n}: no string field {text_key!r}; set data.text_key to the text field")
            docs.append(record[text_key])
        return docs
    if txt_document == "paragraph":
        return [p.strip("\r\n") for p in re.split(r"\n[ \t\r\f\v]*\n", text)]
    if txt_document == "line":
        return text.splitlines()
    if txt_document == "file":
        return [text]
    raise DataError(f"unknown data.txt_document={txt_document!r}; use one of {TXT_DOCUMENTS}")


@functools.lru_cache(maxsize=8)
def files_corpus(paths: str, text_key: str = "text", txt_document: str = "paragraph") -> Corpus:
    ids, texts = [], []
    for path in expand_paths(paths):
        base = os.path.basename(path)
        for n, doc in enumerate(file_documents(path, text_key, txt_document)):
            if doc.strip():
                ids.append(f"{base}:{n}")
                texts.append(doc)
    if not texts:
        raise DataError(f"no non-empty documents in data.paths={paths!r}; the files are empty or whitespace only")
    return Corpus(f"data.paths={paths!r}", tuple(ids), tuple(texts))


class InMemorySource(seqio.FunctionDataSource):
    """seqio source over an in-memory corpus: {"text": str} per document.

    Shuffling is a full permutation of the split drawn from the seed (performs_internal_shuffling),
    so no shuffle buffer is needed and resuming can skip examples before tokenisation. With
    piece_chars > 0 the examples are the `pieces` of the split's documents (the split itself is
    decided per document, so no document has pieces on both sides).
    """

    def __init__(self, load_corpus, val_fraction: float, piece_chars: int = 0):
        self._load_corpus = load_corpus  # () -> Corpus, called lazily (listing costs I/O)
        self._val_fraction = val_fraction
        self._piece_chars = piece_chars
        super().__init__(dataset_fn=self._dataset_fn, splits=SPLITS, caching_permitted=False)
        self._performs_internal_shuffling = True

    def texts(self, split: str) -> list[str]:
        texts = split_texts(self._load_corpus(), split, self._val_fraction)
        if self._piece_chars:
            texts = [p for t in texts for p in pieces(t, self._piece_chars)]
        return texts

    def num_input_examples(self, split: str) -> int:
        return len(self.texts(split))

    def ordered_texts(self, split: str, shuffle: bool, seed: int | None) -> list[str]:
        """The split's texts, permuted by `seed` when shuffling (the order of every pass over the source)."""
        texts = self.texts(split)
        if not shuffle:
            return texts
        return [texts[i] for i in np.random.default_rng(seed or 0).permutation(len(texts))]

    def _dataset_fn(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
        texts = self.ordered_texts(split, shuffle_files, seed)
        return tf.data.Dataset.from_tensor_slices({"text": tf.constant(texts, tf.string)})

    def get_dataset(self, split="train", shuffle=True, seed=None, shard_info=None, **unused):
        if shard_info and shard_info.num_shards > 1:
            raise ValueError("InMemorySource shards examples: use tf.data.Dataset.shard")
        return self._dataset_fn(split=split, shuffle_files=shuffle, seed=seed)
