"""Raw documents of the in-memory corpora and their train/validation split.

  stdlib  the embedded default corpus: the *.py source files of the running Python's standard library
          (sysconfig.get_paths()["stdlib"]), without site-packages, test suites (test/, tests/,
          idle_test/: machine-dependent and full of deliberately malformed data), build/config
          leftovers and byte caches; files that are empty or not UTF-8 are skipped. Listing order
          is sorted by relative path. The split is by file; the documents the pipeline reads are
          the files' pieces (`pieces`, STDLIB_PIECE_CHARS): runs of whole lines of about 1 KB cut
          at blank lines, so a shuffled batch mixes code from many modules instead of spending
          dozens of consecutive steps inside one long file.
  files   local .txt, .jsonl (each also .gz or .zst compressed) and .parquet files (data.paths:
          comma-separated files, directories or glob patterns). jsonl: one JSON object per line, text
          under data.text_key; parquet: the string column data.text_key. txt: documents are
          blank-line separated paragraphs, lines, or whole files (data.txt_document).
          `iter_file_documents` streams one file (what `prepare` reads); `files_corpus` holds all
          in memory (what tokenizer training and the eval suites read).

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
from typing import Iterator

from linscale_jax.data.decode import decoder_error, open_binary, read_utf8, utf8_error
from linscale_jax.data.errors import DataError

SPLITS = ("train", "validation")
STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test", "lib-dynload"}
TXT_DOCUMENTS = ("paragraph", "line", "file")
STDLIB_PIECE_CHARS = 1024
FILE_TYPES = (".txt", ".jsonl", ".txt.gz", ".jsonl.gz", ".txt.zst", ".jsonl.zst", ".parquet")


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


def split_pieces(corpus: Corpus, split: str, val_fraction: float, piece_chars: int = 0) -> list[str]:
    """The documents of one split: its texts, or with piece_chars > 0 their `pieces` (the split is
    decided per text, so no text has pieces on both sides)."""
    texts = split_texts(corpus, split, val_fraction)
    return [p for t in texts for p in pieces(t, piece_chars)] if piece_chars else texts


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
    order = sorted(range(len(ids)), key=ids.__getitem__)  # by relative path, independent of os.walk order
    if not ids:
        raise DataError(f"no Python sources found under the standard library directory {root}")
    return Corpus(f"the stdlib corpus ({root})", tuple(ids[i] for i in order), tuple(texts[i] for i in order))


def expand_paths(paths: str) -> list[str]:
    """data.paths (comma-separated files, directories, glob patterns) -> sorted existing files."""
    entries = [p.strip() for p in paths.split(",") if p.strip()]
    if not entries:
        raise DataError("data.task='files' needs data.paths: comma-separated .txt/.jsonl[.gz|.zst]/.parquet "
                        "files, directories or globs")
    files, missing = [], []
    for entry in entries:
        entry = os.path.expanduser(entry)
        if os.path.isdir(entry):
            found = [p for ext in FILE_TYPES for p in glob.glob(os.path.join(entry, "**", f"*{ext}"), recursive=True)]
        elif any(c in entry for c in "*?["):
            found = glob.glob(entry, recursive=True)
        else:
            found = [entry] if os.path.isfile(entry) else []
        (files.extend(sorted(found)) if found else missing.append(entry))
    if missing:
        raise DataError(f"data files not found: {missing}; fix data.paths (comma-separated files, directories or globs)")
    for f in files:
        if not f.endswith(FILE_TYPES):
            raise DataError(f"{f}: unsupported file type; data.paths takes {', '.join(FILE_TYPES)} files")
    return files


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # a JSON escape of half a UTF-16 pair


def _jsonl_record(path: str, raw: bytes, n: int, offset: int, text_key: str) -> str | None:
    """The text of line `n` (bytes `raw` at byte offset `offset` of the decompressed file); None for a
    blank line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise utf8_error(path, raw, e, n, offset) from None
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        msg = e.msg.removesuffix(" at")  # "Invalid control character at"
        raise DataError(f"{path}:{n} is not valid JSON ({msg} at column {e.colno}; the line starts at byte offset "
                        f"{offset}); each line must be one JSON object: fix or remove line {n}") from None
    if not isinstance(record, dict) or not isinstance(record.get(text_key), str):
        raise DataError(f"{path}:{n}: no string field {text_key!r}; set data.text_key to the text field")
    text = record[text_key]
    if _SURROGATE_ESCAPE.search(raw):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise DataError(f"{path}:{n} (byte offset {offset}): field {text_key!r} holds a lone surrogate "
                            f"{text[e.start]!r} at character {e.start} (a JSON \\u escape of half a UTF-16 pair), "
                            "which no UTF-8 text can hold; write the character itself or its full pair of escapes, "
                            f"or remove line {n}") from None
    return text


def _jsonl_documents(path: str, text_key: str) -> Iterator[str]:
    n, offset = 0, 0
    with open_binary(path) as f:
        lines = iter(f)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except Exception as e:  # noqa: BLE001 - what the decoder raises: a truncated or corrupt stream
                err = decoder_error(path, e, f"line {n + 1}, byte offset {offset}")
                if err is None:
                    raise
                raise err from None
            n += 1
            text = _jsonl_record(path, raw, n, offset, text_key)
            offset += len(raw)
            if text is not None:
                yield text


def _parquet_documents(path: str, text_key: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except FileNotFoundError:
        raise DataError(f"data file not found: {path}; fix data.paths / --input") from None
    except Exception as e:  # noqa: BLE001 - pyarrow.ArrowInvalid and friends
        size = os.path.getsize(path)
        raise DataError(f"{path}: not a readable Parquet file ({str(e)[:200]}; its footer, the last bytes of its "
                        f"{size}, is read first, so a file cut short fails here): copy it again, or remove it from "
                        "the inputs (data.paths / --input)") from None
    if text_key not in pf.schema_arrow.names:
        raise DataError(f"{path}: no column {text_key!r} (columns: {pf.schema_arrow.names}); set data.text_key "
                        "to the text column")
    batches, row = pf.iter_batches(columns=[text_key], batch_size=1024), 0
    while True:
        try:
            texts = next(batches).column(0).to_pylist()
        except StopIteration:
            return
        except Exception as e:  # noqa: BLE001 - a corrupt page: the footer was read, the data is damaged
            raise DataError(f"{path}: rows from {row} on cannot be read ({str(e)[:200]}); re-create the file or "
                            "remove it from the inputs (data.paths / --input)") from None
        row += len(texts)
        for text in texts:
            if text is not None:
                yield text


def iter_file_documents(path: str, text_key: str = "text", txt_document: str = "paragraph") -> Iterator[str]:
    """The documents of one file, streamed (see module docstring)."""
    if txt_document not in TXT_DOCUMENTS:
        raise DataError(f"unknown data.txt_document={txt_document!r}; use one of {TXT_DOCUMENTS}")
    if path.endswith(".parquet"):
        yield from _parquet_documents(path, text_key)
    elif path.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst")):
        yield from _jsonl_documents(path, text_key)
    else:
        text = read_utf8(path)
        if txt_document == "paragraph":
            yield from (p.strip("\r\n") for p in re.split(r"\n[ \t\r\f\v]*\n", text))
        elif txt_document == "line":
            yield from text.splitlines()
        else:
            yield text


def file_documents(path: str, text_key: str, txt_document: str) -> list[str]:
    return list(iter_file_documents(path, text_key, txt_document))


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


def stream_stdlib(val_fraction: float, shard: int = 0, shards: int = 1) -> Iterator[tuple]:
    """(split, piece, fraction done) of every shards-th stdlib file from `shard` (what prepare reads)."""
    corpus = stdlib_corpus()
    for k, (doc_id, text) in enumerate(zip(corpus.ids, corpus.texts)):
        if k % shards == shard:
            split = "validation" if is_validation(doc_id, val_fraction) else "train"
            for piece in pieces(text, STDLIB_PIECE_CHARS):
                yield split, piece, (k + 1) / len(corpus.ids)


def stream_files(paths: str, text_key: str, txt_document: str, val_fraction: float, shard: int = 0,
                 shards: int = 1) -> Iterator[tuple]:
    """(split, document, None) of host shard `shard` of `shards` of data.paths, streamed file by file
    (every shards-th file when there are at least `shards` files, else every shards-th document),
    and (None, None, fraction done) after each file (what prepare reads)."""
    files = expand_paths(paths)
    by_file = len(files) >= shards
    mine = files[shard::shards] if by_file else files
    sizes = [max(os.path.getsize(f), 1) for f in mine]
    total, done, k = sum(sizes), 0, 0
    for path, size in zip(mine, sizes):
        base = os.path.basename(path)
        for n, doc in enumerate(iter_file_documents(path, text_key, txt_document)):
            if not doc.strip():
                continue
            k += 1
            if by_file or (k - 1) % shards == shard:
                yield ("validation" if is_validation(f"{base}:{n}", val_fraction) else "train"), doc, None
        done += size
        yield None, None, done / total
