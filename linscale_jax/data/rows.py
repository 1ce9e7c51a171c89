"""Rows of global batches read from prepared records by index, and the local cache of prepared corpora.

  recs = open_records(config, "train")            # data.records.Records, checked against the config
  src = RecordRows(recs, batch_size, seed)
  src.rows(step, row_ids) -> batch dict [len(row_ids), t]; src.state(step); src.check_state(state)
  src.rows_of_steps(steps, row_ids) -> [len(steps), len(row_ids), t]: rows(s, row_ids) of each step, one read

Row r of step s is record order[s·B + r] (data.records.order: Grain's index shuffle, O(1) per
index), so a process reads only the rows it asks for and resuming at step s costs one index
computation per row, whatever s is.

records_dir(config): data.task=records:<dir> names a prepared directory. Any other text task (stdlib,
files, tfds:...) is prepared on first use into CACHE/<task>-<vocab>-t<seq_len>-<key>, key a hash of
the corpus options, the vocabulary file and (files) each input's path, size and mtime; one process
prepares under a file lock while the others wait, then all read the same directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os

import numpy as np

from linscale_jax.data import publish, records, sources, tokenize
from linscale_jax.data.errors import DataError, DataRefusal

AUTO_PARALLEL_BYTES = 32 << 20  # inputs above this are tokenised by several processes


def cache_root() -> str:
    return os.environ.get("LINSCALE_DATA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "linscale_jax",
                                                                 "records")


def records_dir(config) -> str:
    """The prepared directory of config.data (prepared into the cache on first use)."""
    from linscale_jax.data import prepare

    d, seq_len = config.data, int(config.train.seq_len)
    src = sources.of(d)
    if src.prepared:
        return src.argument(d)
    if src.documents_fn is None:
        raise DataError(f"data.task={d.task!r} has no records: its rows are synthetic (data.train_rows reads them)")
    tok = tokenize.get(d.vocab, d.get("tiktoken_file", ""))
    ident = json.dumps(dict(format=records.FORMAT, source=src.description(d), vocab=tok.spec,
                            vocab_sha256=tok.fingerprint, seq_len=seq_len, inputs=src.stamp(d)), sort_keys=True)
    key = hashlib.sha256(ident.encode()).hexdigest()[:16]
    tag = "".join(c if c.isalnum() else "_" for c in d.task)[:24]
    vtag = tok.spec if tok.spec in ("byte", "cl100k_base") else f"{tok.spec.split(':')[0]}_{tok.fingerprint[:8]}"
    root = cache_root()
    out = os.path.join(root, f"{tag}-{vtag}-t{seq_len}-{key}")
    if _complete(out):
        return out
    os.makedirs(root, exist_ok=True)
    with publish.flock(out + ".lock", fcntl.LOCK_EX):
        if _complete(out):  # another process prepared it meanwhile
            return out
        many = src.parallel or src.input_bytes(d) > AUTO_PARALLEL_BYTES
        processes = min(os.cpu_count() or 1, 8) if many else 1
        print(f"Preparing data.task={d.task} (vocab {tok.spec}, seq_len {seq_len}) once into {out}; for large "
              "corpora on many hosts run `python -m linscale_jax.data.prepare` and use data.task=records:<dir>.",
              flush=True)
        prepare.prepare(d, seq_len, out, processes=processes, log=lambda m: print(m, flush=True),
                        elsewhere=f"set $LINSCALE_DATA_CACHE to a directory on a larger disk (the corpora prepared "
                        f"under {root} can be deleted)")
    return out


def _complete(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, records.MANIFEST))


def check_model_vocab(config, vocab_size: int) -> None:
    """Token ids must index the model's embedding: model.vocab_size >= the vocabulary's size."""
    model = config.get("model")
    if model is not None and model.get("vocab_size", vocab_size) < vocab_size:
        raise DataError(
            f"model.vocab_size={model.vocab_size} is smaller than the {config.data.vocab!r} vocabulary "
            f"({vocab_size} ids); set --config.model.vocab_size={vocab_size}"
        )


def open_records(config, split: str) -> records.Records:
    """The records of `split` for config (prepared on first use), checked against data.vocab,
    train.seq_len and model.vocab_size."""
    recs = records.Records(records_dir(config), split)
    recs.check_tokenizer(tokenize.get(config.data.vocab, config.data.get("tiktoken_file", "")))
    recs.check_seq_len(int(config.train.seq_len))
    check_model_vocab(config, int(recs.meta["vocab_size"]))
    return recs


STATE_KEYS = ("kind", "split", "seed", "batch_size", "fingerprint")


class RecordRows:
    """Rows of the global batches of one split of prepared records (see module docstring)."""

    def __init__(self, recs: records.Records, batch_size: int, seed: int):
        self.records, self.batch_size, self.seed = recs, batch_size, seed
        self.seq_len = recs.seq_len
        self.tokens_read = 0  # tokens of the rows this process read (benchmarks)
        self._order = None

    @property
    def order(self):
        if self._order is None:
            if len(self.records) == 0:
                raise DataError(f"the {self.records.split} split of {self.records.directory} has no rows; add "
                                "documents or change data.val_fraction (prepare: --val_fraction)")
            self._order = records.order(len(self.records), self.seed)
        return self._order

    def keys(self, step: int, row_ids) -> list[int]:
        base = int(step) * self.batch_size
        return [self.order[base + int(r)] for r in row_ids]

    def rows(self, step: int, row_ids) -> dict:
        targets, segs = self.records.read(self.keys(step, row_ids))
        self.tokens_read += targets.size
        return records.to_batch(targets, segs, self.records.pad_id)

    def rows_of_steps(self, steps, row_ids) -> dict:
        """rows(s, row_ids) for each step s of `steps`, stacked [len(steps), len(row_ids), t], read
        in one call (a read has a fixed cost: the train loop reads a block of steps at once)."""
        steps, row_ids = list(steps), list(row_ids)
        keys = [k for s in steps for k in self.keys(s, row_ids)]
        targets, segs = self.records.read(keys)
        self.tokens_read += targets.size
        batch = records.to_batch(targets, segs, self.records.pad_id)
        return {k: v.reshape(len(steps), len(row_ids), *v.shape[1:]) for k, v in batch.items()}

    def one_pass(self, num_batches: int) -> list[dict]:
        """The first num_batches batches of epoch 0 (fewer if the split is short; the last padded)."""
        order = self.order  # raises DataError on an empty split
        n = min(num_batches * self.batch_size, len(self.records))
        keys = [order[i] for i in range(n)]
        targets, segs = self.records.read(keys)
        out = []
        for i in range(0, n, self.batch_size):
            t, s = targets[i:i + self.batch_size], segs[i:i + self.batch_size]
            if len(t) < self.batch_size:  # empty rows: segment 0, weight 0
                pad = self.batch_size - len(t)
                t = np.concatenate([t, np.full((pad, self.seq_len), self.records.pad_id, np.int32)])
                s = np.concatenate([s, np.zeros((pad, self.seq_len), np.int32)])
            out.append(records.to_batch(t, s, self.records.pad_id))
        if len(out) < num_batches:
            logging.warning("%s/%s holds only %d of the %d eval batches requested", self.records.directory,
                            self.records.split, len(out), num_batches)
        return out

    def state(self, step: int) -> dict:
        """JSON-serialisable position before the batch of `step` (0-based)."""
        n = len(self.records)
        return dict(kind="records", split=self.records.split, step=int(step), seed=self.seed,
                    batch_size=self.batch_size, epoch=int(step) * self.batch_size // max(n, 1), rows=n,
                    fingerprint=self.records.fingerprint, directory=self.records.directory)

    def check_state(self, state: dict) -> None:
        """Refuse a saved position taken on other records, seed or batch size."""
        if "kind" not in state:
            logging.warning("the checkpoint's data state predates prepared records; batches continue from the "
                            "records at the checkpoint's step")
            return
        mine = self.state(0)
        diff = {k: (state.get(k), mine[k]) for k in STATE_KEYS if state.get(k) != mine[k]}
        if diff:
            hint = (f"the records in {self.records.directory} differ from those the run was trained on; point "
                    "data.task at the original records or start a new run") if "fingerprint" in diff else \
                "resume with the same data.task, vocab, seed and train.batch_size"
            raise DataRefusal(f"data state does not match this run (saved, current): {diff}; {hint}")


class StepIterator:
    """Iterator of whole global batches of a row source, from step 0; get_state/set_state seek."""

    def __init__(self, source):
        self.source, self.step = source, 0

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        batch = self.source.rows(self.step, range(self.source.batch_size))
        self.step += 1
        return batch

    def get_state(self) -> dict:
        return self.source.state(self.step)

    def set_state(self, state: dict) -> None:
        self.source.check_state(state)
        self.step = int(state.get("step", state.get("batches", 0)))
