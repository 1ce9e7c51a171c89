"""Prepared records: packed, tokenised rows in ArrayRecord files, addressable by global row index.

Layout of a prepared directory DIR (local or gs://), written by `python -m linscale_jax.data.prepare`:

  DIR/dataset.json                                   the manifest: recipe, version, files, fingerprints
  DIR/<version>/<split>/shard-<i>-of-<n>.array_record  rows of host shard i (split: train, validation)
  DIR/<version>/shard-<i>-of-<n>.json                shard i's files: rows, tokens, documents, bytes, sha256

One record is one packed row of seq_len tokens: targets [t] then segment_ids [t], little-endian, in
the dtypes of dataset.json (uint16 when the ids fit, else uint32); segment ids number a row's
documents from 1, 0 is padding. Global row r of a split is row r of the shards in shard order.
What is checked when, the packing and the training order: docs/training.md "Data".
"""

from __future__ import annotations

import functools
import hashlib
import json

import numpy as np
from etils import epath

from linscale_jax.data import tokenize
from linscale_jax.data.errors import DataError

FORMAT = "linscale-records-2"
MANIFEST = "dataset.json"
RECIPE = ("format", "vocab", "vocab_fingerprint", "vocab_size", "eos_id", "pad_id", "seq_len", "token_dtype",
          "segment_dtype", "shards", "source")  # what the records are made from (dataset.json)
FILE_FIELDS = ("rows", "tokens", "documents", "bytes", "sha256")  # one shard file's entry
SPLITS = ("train", "validation")
WRITER_OPTIONS = "group_size:1"  # one record per chunk: random access (Grain's requirement)


def shard_name(i: int, n: int) -> str:
    return f"shard-{i:05d}-of-{n:05d}"


def shard_file(root, version: str, split: str, i: int, n: int):
    return epath.Path(root) / version / split / f"{shard_name(i, n)}.array_record"


def claim_file(root, version: str, i: int, n: int):
    """Shard i's entry of its files (FILE_FIELDS per split), written after them."""
    return epath.Path(root) / version / f"{shard_name(i, n)}.json"


def fingerprint(manifest: dict, split: str) -> str:
    """sha256 of the recipe and the split's file entries: what the split's rows are, from their bytes."""
    body = dict({k: manifest[k] for k in RECIPE}, files=manifest["files"][split], split=split)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def dtypes(vocab_size: int, seq_len: int) -> tuple[str, str]:
    """(token dtype, segment-id dtype) of a dataset: uint16 where the values fit."""
    return ("uint16" if vocab_size <= 1 << 16 else "uint32"), ("uint16" if seq_len < 1 << 16 else "uint32")


class Packer:
    """Stream packing of tokenised documents into rows of seq_len (see module docstring)."""

    def __init__(self, seq_len: int, pad_id: int):
        self.t, self.pad_id = seq_len, pad_id
        self._tok = np.zeros(0, np.int64)
        self._start = np.zeros(0, bool)

    def add(self, docs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Append documents (int [t_doc] each, EOS included; documents of <= 1 token are skipped);
        returns the rows completed: targets [k, t], segment_ids [k, t] (int64)."""
        docs = [d for d in docs if len(d) > 1]
        if not docs:
            return np.zeros((0, self.t), np.int64), np.zeros((0, self.t), np.int64)
        starts = []
        for d in docs:
            s = np.zeros(len(d), bool)
            s[0] = True
            starts.append(s)
        tok = np.concatenate([self._tok, *docs])
        start = np.concatenate([self._start, *starts])
        k = len(tok) // self.t
        self._tok, self._start = tok[k * self.t:], start[k * self.t:]
        return self._rows(tok[: k * self.t].reshape(k, self.t), start[: k * self.t].reshape(k, self.t))

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """The last, partial row padded with pad_id (segment 0); empty if nothing is pending."""
        n = len(self._tok)
        if n == 0:
            return np.zeros((0, self.t), np.int64), np.zeros((0, self.t), np.int64)
        tok = np.full((1, self.t), self.pad_id, np.int64)
        start = np.zeros((1, self.t), bool)
        tok[0, :n], start[0, :n] = self._tok, self._start
        targets, seg = self._rows(tok, start)
        seg[0, n:] = 0
        self._tok, self._start = self._tok[:0], self._start[:0]
        return targets, seg

    @staticmethod
    def _rows(tok: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = start.copy()
        start[:, 0] = True  # a row always starts a segment (a continued document is a new one)
        return tok, np.cumsum(start, axis=1)


def encode_rows(targets: np.ndarray, segment_ids: np.ndarray, token_dtype: str, segment_dtype: str) -> list[bytes]:
    """One record (bytes) per row."""
    tok, seg = targets.astype("<" + np.dtype(token_dtype).str[1:]), segment_ids.astype("<" + np.dtype(segment_dtype).str[1:])
    return [tok[i].tobytes() + seg[i].tobytes() for i in range(len(tok))]


def to_batch(targets: np.ndarray, segment_ids: np.ndarray, pad_id: int) -> dict:
    """Training batch of packed rows [k, t]: inputs, targets, segment_ids (int32), weights (float32)."""
    targets, segment_ids = targets.astype(np.int32), segment_ids.astype(np.int32)
    inputs = np.full_like(targets, pad_id)
    inputs[:, 1:] = targets[:, :-1]
    starts = np.ones_like(segment_ids, bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    inputs[starts | (segment_ids == 0)] = pad_id  # segment starts and padding
    return dict(inputs=inputs, targets=targets, segment_ids=segment_ids,
                weights=(segment_ids > 0).astype(np.float32))


def read_json(path: epath.Path) -> dict:
    return json.loads(path.read_text())


class Records:
    """One split of a prepared directory: `len(records)` rows, `read(keys)` -> targets, segment_ids."""

    def __init__(self, directory: str, split: str):
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; use one of {SPLITS}")
        self.directory, self.split = str(directory), split
        root = epath.Path(directory)
        if not (root / MANIFEST).exists():
            raise DataError(unpublished(root))
        self.meta = read_json(root / MANIFEST)
        if self.meta.get("format") != FORMAT:
            raise DataError(f"{directory}/{MANIFEST} is format {self.meta.get('format')!r}, not {FORMAT!r}; remove "
                            f"{directory} and prepare the corpus again with this version")
        n, version = int(self.meta["shards"]), self.meta["version"]
        self.shards = self.meta["files"][split]
        self.fingerprint = fingerprint(self.meta, split)
        if self.fingerprint != self.meta["fingerprints"][split]:
            raise DataError(f"{directory}/{MANIFEST}: its {split} fingerprint does not match its own file list (the "
                            f"file was edited); prepare {directory} again")
        files = [shard_file(root, version, split, i, n) for i in range(n)]
        for f, m in zip(files, self.shards):
            size = f.stat().length if f.exists() else None
            if size != m["bytes"]:
                found = "is missing" if size is None else f"holds {size} bytes"
                raise DataError(f"{f} {found}, not the {m['bytes']} bytes that {directory}/{MANIFEST} records "
                                f"(fingerprint {self.fingerprint[:12]}): the records changed after they were "
                                f"prepared; prepare {directory} again (python -m linscale_jax.data.prepare)")
        self.paths = [str(f) for f, m in zip(files, self.shards) if m["rows"]]
        self.seq_len = int(self.meta["seq_len"])
        self.pad_id, self.eos_id = int(self.meta["pad_id"]), int(self.meta["eos_id"])
        self.rows = sum(int(m["rows"]) for m in self.shards)
        self.tokens = sum(int(m["tokens"]) for m in self.shards)
        self.documents = sum(int(m["documents"]) for m in self.shards)
        self._tok = np.dtype(self.meta["token_dtype"]).newbyteorder("<")
        self._seg = np.dtype(self.meta["segment_dtype"]).newbyteorder("<")

    def __len__(self) -> int:
        return self.rows

    @functools.cached_property
    def source(self):
        import grain.python as grain

        if not self.paths:
            raise DataError(f"the {self.split} split of {self.directory} has no rows; prepare more text or "
                            "change --val_fraction")
        try:
            return grain.ArrayRecordDataSource(self.paths)
        except Exception as e:  # noqa: BLE001 - the C++ reader's errors name the file
            remote = self.directory.startswith(("gs://", "s3://"))
            hint = ("ArrayRecord files are read from a file system: mount the bucket with Cloud Storage FUSE "
                    "(gcsfuse, as MaxText does) and pass records:<mount path>") if remote else \
                "prepare the corpus again"
            raise DataError(f"cannot open the records of {self.directory}/{self.split} ({str(e)[:200]}); "
                            f"{hint}") from None

    def read(self, keys) -> tuple[np.ndarray, np.ndarray]:
        """targets [k, t], segment_ids [k, t] (int32) of global rows `keys`."""
        keys = [int(k) for k in keys]
        t = self.seq_len
        targets = np.empty((len(keys), t), np.int32)
        segs = np.empty((len(keys), t), np.int32)
        if not keys:
            return targets, segs
        raw = self.source.__getitems__(keys)
        nt = t * self._tok.itemsize
        for i, rec in enumerate(raw):
            targets[i] = np.frombuffer(rec, self._tok, t)
            segs[i] = np.frombuffer(rec, self._seg, t, offset=nt)
        return targets, segs

    def check_tokenizer(self, tok) -> None:
        """Refuse a config whose data.vocab differs from the tokenizer the records were made with."""
        if (self.meta["vocab"], self.meta["vocab_fingerprint"]) != (tok.spec, tok.fingerprint):
            raise DataError(f"{self.directory} was tokenised with vocab {self.meta['vocab']!r} (sha256 "
                            f"{self.meta['vocab_fingerprint'][:12]}), not data.vocab={tok.spec!r} (sha256 "
                            f"{tok.fingerprint[:12]}); set --config.data.vocab={self.meta['vocab']} or prepare "
                            "the corpus with this vocabulary")

    def check_seq_len(self, seq_len: int) -> None:
        if seq_len != self.seq_len:
            raise DataError(f"{self.directory} holds rows of {self.seq_len} tokens, not train.seq_len={seq_len}; "
                            f"set --config.train.seq_len={self.seq_len} or prepare the corpus with "
                            f"--seq_len={seq_len}")


def documents(directory: str, split: str, tiktoken_file: str = ""):
    """The documents of a prepared split, decoded (rows in order, cut after each EOS)."""
    recs = Records(directory, split)
    tok = tokenize.get(recs.meta["vocab"], tiktoken_file)
    pending = []
    for start in range(0, len(recs), 1024):
        targets, segs = recs.read(range(start, min(start + 1024, len(recs))))
        tokens = targets[segs > 0]
        cuts = np.flatnonzero(tokens == recs.eos_id) + 1
        pieces = np.split(tokens, cuts)
        for piece in pieces[:-1]:
            yield tok.decode(np.concatenate(pending + [piece[:-1]]).tolist())
            pending = []
        pending.append(pieces[-1])


def unpublished(root) -> str:
    """What a directory without dataset.json holds, and what to run."""
    claims = sorted(root.glob("v-*/shard-*-of-*.json")) if root.is_dir() else []
    if not claims:
        return (f"{root} holds no prepared records (no {MANIFEST}); create them with "
                f"`python -m linscale_jax.data.prepare --input=... --out={root}`")
    version = claims[-1].parent.name
    n = int(claims[-1].stem.rsplit("-of-", 1)[1])
    done = {int(c.stem.split("-")[1]) for c in claims if c.parent.name == version}
    missing = [f"--shard={i}/{n}" for i in range(n) if i not in done]
    return (f"{root}: {len(missing)} of {n} shards are not prepared (version {version}); run prepare with "
            f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} and the same flags")


def order(num_rows: int, seed: int):
    """Grain's index shuffle: order[i] is the row read at stream position i (epoch i // num_rows)."""
    import grain

    if not 0 <= seed < 1 << 31:
        raise DataError(f"data.seed={seed} must be in [0, 2**31) for the record shuffle")
    return grain.MapDataset.range(num_rows).shuffle(seed=seed)
