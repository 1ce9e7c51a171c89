"""Tokenise and pack a corpus into prepared records (data.records), in parallel over cores and hosts.

  python -m linscale_jax.data.prepare --input=/data/c4/*.jsonl.zst --vocab=hf:/tok/tokenizer.json \
      --seq_len=2048 --out=gs://bucket/c4-llama3-2048 [--shard=i/n] [--processes=N]
  python -m linscale_jax.data.prepare --input=tfds:c4 --tfds_data_dir=gs://bucket/tfds --vocab=byte ...
then train with --config.data.task=records:<out> (data.vocab and train.seq_len must match; the
trainer refuses others). The default corpus and data.task=files|tfds:... are prepared automatically
into a local cache on first use (data.records_dir), so `prepare` is for large corpora, gs:// outputs
and many hosts.

Inputs (--input): stdlib; comma-separated .txt, .jsonl, .jsonl.gz, .jsonl.zst (.txt.gz, .txt.zst)
and .parquet files, directories or globs (text under --text_key); tfds:<name>[:<version>].
Vocabularies (--vocab): byte | sentencepiece:<.model> | cl100k_base | hf:<tokenizer.json>.

Splits. Local files and stdlib: a document goes to validation when the hash of its id
(<file name>:<n>) falls below --val_fraction (as data.task=files does); tfds: its own splits.
Hosts. --shard=i/n prepares shard i of n: every n-th file when there are at least n files, else
every n-th document; each host writes only its shard files, and the host that finds all n shards
there publishes the directory (data.publish: versions beside each other, dataset.json written last
and atomically; other inputs into the same --out refuse). Cores. Documents are tokenised by
--processes worker processes in chunks and packed in order by the main process, so the records do
not depend on the number of processes.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import time

import ml_collections

from linscale_jax.data import corpora, publish, records, sources, tokenize
from linscale_jax.data.errors import DataError
from linscale_jax.run import storage

CHUNK_CHARS = 1 << 20  # text per tokenisation task
CHUNK_DOCS = 4096
PROGRESS_EVERY_S = 5.0


# ----------------------------------------------------------------------------- tokenising workers

_worker_tok = None


def _init_worker(spec: str, tiktoken_file: str) -> None:
    global _worker_tok
    _worker_tok = tokenize.get(spec, tiktoken_file)


def _encode_chunk(chunk: list[tuple[str, str]]):
    texts = [t for _, t in chunk]
    return [s for s, _ in chunk], _worker_tok.encode_with_eos(texts)


def _chunks(docs, progress):
    chunk, chars = [], 0
    for split, text, frac in docs:
        if frac is not None:
            progress["fraction"] = frac
        if split is None:
            continue
        chunk.append((split, text))
        chars += len(text)
        if chars >= CHUNK_CHARS or len(chunk) >= CHUNK_DOCS:
            yield chunk
            chunk, chars = [], 0
    if chunk:
        yield chunk


@contextlib.contextmanager
def _encoder(tok: tokenize.Tokenizer, processes: int, tiktoken_file: str):
    """imap-like function over chunks: in this process, or over `processes` spawned workers."""
    if processes <= 1:
        _init_worker(tok.spec, tiktoken_file)
        yield lambda chunks: map(_encode_chunk, chunks)
        return
    ctx = multiprocessing.get_context("spawn")  # no forked TensorFlow / tokenizer thread pools
    with ctx.Pool(processes, initializer=_init_worker, initargs=(tok.spec, tiktoken_file)) as pool:
        yield lambda chunks: pool.imap(_encode_chunk, chunks)


# ----------------------------------------------------------------------------- prepare

def _fmt_eta(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _test_fault():
    """LINSCALE_PREPARE_FAULT (tests only): enospc@N raises a full disk at the N-th record written;
    pause@<split> stops for a minute once the split's shard file is in place (to be killed there)."""
    spec = os.environ.get("LINSCALE_PREPARE_FAULT", "")
    what, _, arg = spec.partition("@")

    def on_write(n: int, path: str) -> None:
        if what == "enospc" and n == int(arg):
            raise OSError(errno.ENOSPC, "No space left on device", path)

    def pause(point: str) -> None:
        if what == "pause" and point == arg:
            print(f"paused after {point}", flush=True)
            time.sleep(60)

    return on_write, pause


def prepare(data_config, seq_len: int, out: str, shard: int = 0, shards: int = 1, processes: int = 1,
            log=print, elsewhere: str = "pass another --out") -> dict:
    """Write shard `shard` of `shards` of the records of `data_config`'s corpus into `out` (a new
    version beside what `out` holds, published when every shard is there: data.publish).
    Returns {split: {rows, tokens, documents, bytes, sha256}} of this shard. `elsewhere` is the
    full-disk line's other way out."""
    if not 0 <= shard < shards:
        raise DataError(f"--shard={shard}/{shards}: the shard index must be in [0, {shards})")
    if seq_len < 2:
        raise DataError(f"--seq_len={seq_len}: rows need at least 2 tokens")
    src = sources.of(data_config)
    tok = tokenize.get(data_config.vocab, data_config.get("tiktoken_file", ""))
    token_dtype, segment_dtype = records.dtypes(tok.vocab_size, seq_len)
    recipe = dict(format=records.FORMAT, vocab=tok.spec, vocab_fingerprint=tok.fingerprint, vocab_size=tok.vocab_size,
                  eos_id=tok.eos_id, pad_id=tok.pad_id, seq_len=seq_len, token_dtype=token_dtype,
                  segment_dtype=segment_dtype, shards=shards, source=src.description(data_config))
    inputs = hashlib.sha256(json.dumps([recipe, src.stamp(data_config)]).encode()).hexdigest()
    version = f"v-{inputs[:16]}"
    on_write, pause = _test_fault()
    progress = dict(fraction=None, bytes=0)
    t0 = time.perf_counter()
    log(f"prepare {data_config.task} -> {out} (shard {shard}/{shards}, vocab {tok.spec}, seq_len {seq_len}, "
        f"{processes} process{'es' if processes > 1 else ''})")
    writer = publish.Writer(out, version, recipe, shard, shards, log, pause)
    try:
        with writer:
            if writer.published:
                log(f"  {out} already holds these records ({version}); nothing to do")
                manifest = writer.manifest()
                return {s: manifest["files"][s][shard] for s in records.SPLITS}
            if writer.todo:
                stats = _write_shard(data_config, src, tok, seq_len, shard, shards, processes, writer.stage,
                                     on_write, progress, log)
                writer.commit(stats)
            else:
                log(f"  shard {shard}/{shards} is already in {out}/{version}")
            stats = records.read_json(records.claim_file(out, version, shard, shards))
            if not writer.publish(inputs):
                log(f"  shard {shard}/{shards} done; {out} is published once all {shards} shards are there")
    except Exception as e:
        if not storage.disk_full(e):
            raise
        raise DataError(_disk_full_line(out, writer, progress, elsewhere)) from e
    dt = time.perf_counter() - t0
    log(f"  done in {dt:.1f}s: " + ", ".join(f"{s} {stats[s]['rows']:,} rows ({publish.size_text(stats[s]['bytes'])})"
                                             for s in records.SPLITS)
        + (f"; published {out}/{records.MANIFEST} ({version})" if writer.published else ""))
    old = writer.superseded()
    if writer.published and old:
        log(f"  the records published before stay in {', '.join(p for p, _ in old)} "
            f"({publish.size_text(sum(b for _, b in old))}) for runs reading them; the next prepare into {out} removes "
            "them")
    return stats


def _disk_full_line(out: str, writer, progress: dict, elsewhere: str) -> str:
    where = writer.stage if writer.stage and not writer.local else out
    probe = next((p for p in (where, os.path.dirname(where.rstrip("/"))) if os.path.isdir(p)), None)
    free = f", {publish.size_text(shutil.disk_usage(probe).free)} free now" if probe else ""
    old = writer.superseded()
    older = (f"; {', '.join(p for p, _ in old)} ({publish.size_text(sum(b for _, b in old))}) hold earlier records "
             "and can go if no run reads them") if old else ""
    return (f"no space left on device while preparing {out} (the disk filled after "
            f"{publish.size_text(progress['bytes'])} of records{free}; prepare removed its partial files); free "
            f"space on the disk of {where} (df -h {probe or where}){older}, or {elsewhere}, then re-run the same "
            "command")


def _write_shard(data_config, src, tok, seq_len, shard, shards, processes, stage, on_write, progress, log) -> dict:
    """Tokenise and pack this shard's documents into stage/<split>.array_record; returns the stats."""
    from array_record.python.array_record_module import ArrayRecordWriter

    token_dtype, segment_dtype = records.dtypes(tok.vocab_size, seq_len)
    tiktoken_file = data_config.get("tiktoken_file", "")
    paths = {s: os.path.join(stage, f"{s}.array_record") for s in records.SPLITS}
    writers = {s: ArrayRecordWriter(paths[s], records.WRITER_OPTIONS) for s in records.SPLITS}
    packers = {s: records.Packer(seq_len, tok.pad_id) for s in records.SPLITS}
    stats = {s: dict(rows=0, tokens=0, documents=0) for s in records.SPLITS}
    count = [0]

    def write(split, rows):
        targets, segs = rows
        for rec in records.encode_rows(targets, segs, token_dtype, segment_dtype):
            count[0] += 1
            on_write(count[0], paths[split])
            writers[split].write(rec)
            progress["bytes"] += len(rec)
        stats[split]["rows"] += len(targets)
        stats[split]["tokens"] += int((segs > 0).sum())

    t0 = last = time.perf_counter()
    n_docs = n_tok = 0
    try:
        with _encoder(tok, processes, tiktoken_file) as imap:
            for splits, docs in imap(_chunks(src.documents(data_config, shard, shards), progress)):
                for split in records.SPLITS:
                    mine = [d for s, d in zip(splits, docs) if s == split and len(d) > 1]
                    if mine:
                        stats[split]["documents"] += len(mine)
                        write(split, packers[split].add(mine))
                        n_docs += len(mine)
                        n_tok += sum(len(d) for d in mine)
                now = time.perf_counter()
                if now - last >= PROGRESS_EVERY_S:
                    last, dt, frac = now, now - t0, progress["fraction"]
                    eta = f", ETA {_fmt_eta(dt * (1 - frac) / frac)}" if frac else ""
                    log(f"  {n_docs:,} docs, {n_tok:,} tokens: {n_docs / dt:,.0f} docs/s, {n_tok / dt:,.0f} "
                        f"tokens/s{eta}")
        for split in records.SPLITS:
            write(split, packers[split].finish())
    finally:
        for w in writers.values():
            w.close()
    if n_docs == 0:
        raise DataError(f"shard {shard}/{shards} of {data_config.task} {src.description(data_config)} holds no "
                        "non-empty documents; check the input (files empty or whitespace only) or use fewer shards")
    dt = time.perf_counter() - t0
    log(f"  {n_docs:,} docs, {n_tok:,} tokens in {dt:.1f}s ({n_tok / max(dt, 1e-9):,.0f} tokens/s)")
    return stats


# ----------------------------------------------------------------------------- command line

def data_config_from_args(args) -> ml_collections.ConfigDict:
    from linscale_jax.config import base_config

    c = base_config().data
    c.task, c.paths = sources.input_task(args.input)
    c.vocab, c.text_key, c.txt_document = args.vocab, args.text_key, args.txt_document
    c.val_fraction, c.tfds_data_dir, c.tiktoken_file = args.val_fraction, args.tfds_data_dir, args.tiktoken_file
    return c


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise DataError(f"--shard={text!r}: use i/n, e.g. --shard=0/32 on the first of 32 hosts") from None
    return i, n


def main(argv=None) -> int:
    from linscale_jax.run import command
    from linscale_jax.errors import ArgumentParser

    parser = ArgumentParser(prog="python -m linscale_jax.data.prepare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="stdlib | files/dirs/globs (comma-separated) | tfds:<name>")
    parser.add_argument("--vocab", default="byte", help=tokenize.VOCAB_FORMS)
    parser.add_argument("--seq_len", type=int, required=True, help="tokens per packed row (= train.seq_len)")
    parser.add_argument("--out", required=True, help="output directory (local or gs://)")
    parser.add_argument("--shard", default="0/1", help="i/n: prepare shard i of n (one per host)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="tokenising processes")
    parser.add_argument("--text_key", default="text", help="jsonl field / parquet column / tfds feature")
    parser.add_argument("--txt_document", default="paragraph", choices=corpora.TXT_DOCUMENTS)
    parser.add_argument("--val_fraction", type=float, default=0.05, help="share of documents held out (files)")
    parser.add_argument("--tfds_data_dir", default="")
    parser.add_argument("--tiktoken_file", default="", help="local cl100k_base.tiktoken")
    args = parser.parse_args(argv)

    def run():
        shard, shards = parse_shard(args.shard)
        prepare(data_config_from_args(args), args.seq_len, args.out, shard, shards, args.processes)
        print(f"train with --config.data.task=records:{args.out} --config.data.vocab={args.vocab} "
              f"--config.train.seq_len={args.seq_len}")

    return command.run(run, command="prepare")


if __name__ == "__main__":
    sys.exit(main())
