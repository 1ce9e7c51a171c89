"""`python -m linscale_jax.data.prepare`: input formats, hf: tokenizers, shards, worker processes, errors,
and a training run on a .jsonl.zst corpus with a tokenizer.json trained here (nothing downloaded)."""

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
from helpers.train import ROOT, tiny_config

from linscale_jax import data
from linscale_jax.config import base_config
from linscale_jax.data import prepare, records, tokenize

DOCS = [f"Document {i}: {'the quick brown fox ' * (i % 7 + 1)}jumps over the lazy dog ü✓ {i * i}." for i in range(60)]


def write_corpus(path, docs=DOCS, key="text"):
    """docs as .txt (one per paragraph), .jsonl[.gz|.zst] or .parquet, by the file name."""
    path = str(path)
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({key: docs, "id": list(range(len(docs)))}), path, row_group_size=16)
        return path
    text = "\n\n".join(docs) if ".txt" in path else "".join(json.dumps({key: d}) + "\n" for d in docs)
    raw = text.encode()
    if path.endswith(".gz"):
        raw = gzip.compress(raw)
    elif path.endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdCompressor().compress(raw)
    with open(path, "wb") as f:
        f.write(raw)
    return path


def train_hf_tokenizer(path, docs=DOCS, vocab_size=300):
    """A byte-level BPE tokenizer.json trained on `docs` with the `tokenizers` library."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    tok.save(str(path))
    return str(path)


def config_for(paths, **fields):
    c = base_config()
    c.data.task, c.data.paths, c.data.val_fraction = "files", str(paths), 0.0
    c.data.update(fields)
    return c.data


def shard_bytes(directory, split, i=0, n=1):
    version = json.loads((directory / "dataset.json").read_text())["version"]
    return records.shard_file(directory, version, split, i, n).read_bytes()


def records_documents(directory, split="train"):
    c = base_config().data
    c.task = f"records:{directory}"
    return list(data.corpus_documents(c, split))


@pytest.mark.parametrize("name", ["c.txt", "c.jsonl", "c.jsonl.gz", "c.jsonl.zst", "c.parquet"])
def test_every_input_format_decodes_back(tmp_path, name):
    path = write_corpus(tmp_path / name)
    out = tmp_path / "out"
    stats = prepare.prepare(config_for(path), 32, str(out))
    assert records_documents(out) == DOCS
    assert stats["train"]["documents"] == len(DOCS) and stats["validation"]["rows"] == 0
    meta = json.loads((out / "dataset.json").read_text())
    assert (meta["vocab"], meta["seq_len"], meta["token_dtype"], meta["shards"]) == ("byte", 32, "uint16", 1)


def test_hf_tokenizer_ids_roundtrip_and_seqio_wrapper(tmp_path):
    path = train_hf_tokenizer(tmp_path / "tokenizer.json")
    tok = tokenize.get(f"hf:{path}")
    assert (tok.pad_id, tok.eos_id) == (0, 1) and tok.vocab_size == 300
    text = "the quick brown fox ü✓ 1234\n\tx"
    (ids,) = tok.encode_batch([text])
    assert len(ids) < len(text.encode()) // 2 and tok.decode(ids.tolist()) == text  # merges used, lossless
    assert tok.eos_id not in ids
    vocab = data.get_vocabulary(config_for("", vocab=f"hf:{path}"))
    assert vocab.vocab_size == 300 and vocab.eos_id == 1
    assert list(vocab.encode(DOCS[3])) == tok.encode_batch([DOCS[3]])[0].tolist()
    assert vocab.decode(vocab.encode(DOCS[3])) == DOCS[3]
    out = tmp_path / "out"
    prepare.prepare(config_for(write_corpus(tmp_path / "c.jsonl.zst"), vocab=f"hf:{path}"), 16, str(out))
    assert records_documents(out) == DOCS


def test_shards_and_processes_give_the_same_records(tmp_path):
    files = [write_corpus(tmp_path / f"part{i}.jsonl", DOCS[i::3]) for i in range(3)]
    cfg = config_for(",".join(files), val_fraction=0.3)
    one = tmp_path / "one"
    prepare.prepare(cfg, 24, str(one))
    par = tmp_path / "par"
    prepare.prepare(cfg, 24, str(par), processes=2)  # two spawned tokenising workers
    for split in records.SPLITS:
        assert shard_bytes(one, split) == shard_bytes(par, split)
    assert records.Records(str(one), "train").fingerprint == records.Records(str(par), "train").fingerprint
    for shards in (2, 4):  # by file (2 <= 3 files), by document (4 > 3 files)
        out = tmp_path / f"s{shards}"
        prepare.prepare(cfg, 24, str(out), shard=0, shards=shards)
        with pytest.raises(data.DataError, match=f"1 of {shards} shards|{shards - 1} of {shards} shards"):
            records.Records(str(out), "train")
        for i in range(1, shards):
            prepare.prepare(cfg, 24, str(out), shard=i, shards=shards)
        for split in records.SPLITS:
            assert sorted(records_documents(out, split)) == sorted(records_documents(one, split))


def test_bad_input_gives_one_line_errors_naming_the_fix(tmp_path):
    out = str(tmp_path / "out")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(data.DataError, match="no non-empty documents; check the input"):
        prepare.prepare(config_for(tmp_path / "empty.jsonl"), 32, out)
    (tmp_path / "bad.jsonl.gz").write_bytes(gzip.compress(b'{"text": "ok"}\n{"text": "caf\xe9"}\n'))
    with pytest.raises(data.DataError, match=r"bad.jsonl.gz: not valid UTF-8 .*line 2.*iconv"):
        prepare.prepare(config_for(tmp_path / "bad.jsonl.gz"), 32, out)
    with pytest.raises(data.DataError, match=r"not found: \[.*missing.jsonl.*fix data.paths"):
        prepare.prepare(config_for(tmp_path / "missing.jsonl"), 32, out)
    write_corpus(tmp_path / "c.parquet")
    with pytest.raises(data.DataError, match="no column 'body'.*data.text_key"):
        prepare.prepare(config_for(tmp_path / "c.parquet", text_key="body"), 32, out)
    write_corpus(tmp_path / "c.jsonl")
    with pytest.raises(data.DataError, match="unknown data.vocab='gpt2'; use one of: byte .* hf:"):
        prepare.prepare(config_for(tmp_path / "c.jsonl", vocab="gpt2"), 32, out)
    with pytest.raises(data.DataError, match="tokenizer file .*nope.json.*does not exist.*tokenizer.json"):
        prepare.prepare(config_for(tmp_path / "c.jsonl", vocab=f"hf:{tmp_path / 'nope.json'}"), 32, out)
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(data.DataError, match="not a Hugging Face tokenizer.json"):
        prepare.prepare(config_for(tmp_path / "c.jsonl", vocab=f"hf:{tmp_path / 'junk.json'}"), 32, out)
    # the command line: one line on stderr, exit status 1
    r = subprocess.run([sys.executable, "-m", "linscale_jax.data.prepare", f"--input={tmp_path / 'empty.jsonl'}",
                        "--seq_len=32", f"--out={out}", "--processes=1"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert r.stderr.startswith("ERROR: shard 0/1") and "no non-empty documents" in r.stderr


@pytest.mark.slow  # a trained run: compiles a train step (about a minute on 2 loaded cores)
def test_training_run_on_a_jsonl_zst_corpus_with_an_hf_tokenizer(tmp_path):
    """Train on a .jsonl.zst corpus tokenised by a tokenizer.json trained here, through the CLI."""
    docs = [f"def f{i}(x):\n    return x * {i} + {i % 5}  # {DOCS[i % len(DOCS)]}" for i in range(400)]
    corpus = write_corpus(tmp_path / "code.jsonl.zst", docs)
    tok = train_hf_tokenizer(tmp_path / "tokenizer.json", docs, vocab_size=320)
    out = tmp_path / "records"
    r = subprocess.run([sys.executable, "-m", "linscale_jax.data.prepare", f"--input={corpus}", f"--vocab=hf:{tok}",
                        "--seq_len=32", f"--out={out}", "--processes=2", "--val_fraction=0.1"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"--config.data.task=records:{out}" in r.stdout
    c = tiny_config(steps=30, eval_every=30, eval_batches=1)
    flags = [f"--config={ROOT / 'configs' / 'tiny.py'}:llama-d64", f"--workdir={tmp_path / 'run'}",
             f"--config.data.task=records:{out}", f"--config.data.vocab=hf:{tok}", "--config.model.vocab_size=320",
             "--config.model.n_layers=1", "--config.model.chunk_size=16", "--config.train.steps=30",
             "--config.train.batch_size=4", "--config.train.seq_len=32", "--config.train.eval_every=30",
             "--config.train.eval_batches=1", "--config.train.log_every=10", f"--config.optim.lr={c.optim.lr}",
             "--config.optim.warmup_steps=0", "--config.optim.schedule=constant", "--config.checkpoint.every_steps=0",
             "--config.checkpoint.log_spaced=0"]
    r = subprocess.run([sys.executable, "-m", "linscale_jax.train", *flags], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows] == [10, 20, 30]
    losses = [x["loss"] for x in rows]
    assert losses[-1] < losses[0] < np.log(320) + 0.5 and np.isfinite(rows[-1]["val_loss"])
    meta = json.loads((out / "dataset.json").read_text())
    assert meta["vocab"] == f"hf:{tok}" and meta["vocab_size"] == 320
