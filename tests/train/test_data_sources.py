"""Data sources and vocabularies: local files, SentencePiece (train_spm), cl100k, tfds; clear errors."""

import base64
import json
import os

import numpy as np
import pytest

from linscale_jax import data
from linscale_jax.config import base_config
from linscale_jax.data import prepare, tokenize, train_spm

PARAGRAPHS = [f"Paragraph {i}: the quick brown fox {'jumps ' * i}over the lazy dog.\nSecond line {i}." for i in range(20)]


def files_config(paths, **fields):
    c = base_config()
    c.model.vocab_size = 259
    c.train.seq_len, c.train.batch_size = 32, 2
    c.data.task, c.data.paths, c.data.val_fraction = "files", paths, 0.3
    c.data.update(fields)
    return c


def all_documents(data_config):
    """Documents of both splits (a split that is empty by the hash draw counts as no documents)."""
    docs = []
    for split in ("train", "validation"):
        try:
            docs += list(data.corpus_documents(data_config, split))
        except data.DataError as e:
            assert "is empty" in str(e)
    return docs


def test_local_txt_and_jsonl_files(tmp_path):
    (tmp_path / "a.txt").write_text("\n\n".join(PARAGRAPHS[:10]) + "\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.jsonl").write_text("".join(json.dumps({"body": p}) + "\n" for p in PARAGRAPHS[10:]))
    txt = files_config(str(tmp_path / "a.txt"))
    assert sorted(all_documents(txt.data)) == sorted(PARAGRAPHS[:10])
    lines = files_config(str(tmp_path / "a.txt"), txt_document="line")
    assert len(all_documents(lines.data)) == 20
    jsonl = files_config(str(tmp_path / "sub" / "*.jsonl"), text_key="body")
    assert sorted(all_documents(jsonl.data)) == sorted(PARAGRAPHS[10:])
    both = files_config(f"{tmp_path / 'a.txt'},{tmp_path / 'sub'}", text_key="body", val_fraction=0.2)
    docs = all_documents(both.data)
    assert sorted(docs) == sorted(PARAGRAPHS)
    assert 0 < len(list(data.corpus_documents(both.data, "validation"))) < 20
    batch = next(data.make_iterator(both))
    assert batch["targets"].shape == (2, 32)
    text = data.get_vocabulary(both.data).decode(batch["targets"][0][batch["segment_ids"][0] == 1].tolist())
    assert len(text) > 3 and any(text in p for p in PARAGRAPHS)  # a piece of one paragraph


def test_file_errors_name_the_problem(tmp_path):
    with pytest.raises(data.DataError, match=r"not found: \[.*missing.txt.*fix data.paths"):
        data.make_iterator(files_config(str(tmp_path / "missing.txt")))
    (tmp_path / "empty.txt").write_text("\n \n\n")
    with pytest.raises(data.DataError, match="no non-empty documents"):
        data.make_iterator(files_config(str(tmp_path / "empty.txt")))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf".encode() + b"\nna\xefve text\n")
    with pytest.raises(data.DataError, match=r"latin1.txt: not valid UTF-8 at byte offset 6 \(line 2.*iconv"):
        data.make_iterator(files_config(str(bad)))
    (tmp_path / "x.jsonl").write_text('{"text": "ok"}\n{"title": "no text"}\n')
    with pytest.raises(data.DataError, match=r"x.jsonl:2: no string field 'text'.*data.text_key"):
        data.make_iterator(files_config(str(tmp_path / "x.jsonl")))
    (tmp_path / "one.txt").write_text("a single paragraph")
    with pytest.raises(data.DataError, match="validation split .* has no rows.*val_fraction"):
        data.eval_batches(files_config(str(tmp_path / "one.txt"), val_fraction=0.0), num_batches=1)
    with pytest.raises(data.DataError, match="shard 1/2 .* no non-empty documents.*fewer shards"):
        c = files_config(str(tmp_path / "one.txt"), val_fraction=0.0)
        prepare.prepare(c.data, 32, str(tmp_path / "out"), shard=1, shards=2)  # one document, two shards


def test_unknown_names_are_rejected():
    c = base_config()
    c.data.task = "wikitext"
    with pytest.raises(data.DataError, match="unknown data.task='wikitext'.*stdlib \\| files"):
        data.make_iterator(c)
    c.data.task, c.data.vocab = "stdlib", "gpt2"
    with pytest.raises(data.DataError, match="unknown data.vocab='gpt2'.*byte.*hf:"):
        data.get_vocabulary(c.data)
    with pytest.raises(data.DataError, match="unknown data.vocab='gpt2'.*byte.*hf:"):
        data.train_rows(c)
    c.data.vocab = "sentencepiece:/nonexistent/m.model"
    with pytest.raises(data.DataError, match="does not exist.*linscale_jax.data.train_spm"):
        data.get_vocabulary(c.data)
    c.data.vocab, c.data.task = "byte", "tfds:my_corpus"
    with pytest.raises(data.DataError, match="needs a version"):
        data.make_iterator(c)


def test_tfds_corpus_missing_names_data_dir_and_build_command(tmp_path):
    c = base_config()
    c.data.task, c.data.tfds_data_dir = "tfds:c4", str(tmp_path)
    with pytest.raises(data.DataError, match=f"c4/en:3.1.0.*not prepared under {tmp_path}.*tfds build c4/en"):
        data.make_iterator(c)


def test_tfds_corpus_from_a_local_data_dir(tmp_path):
    pytest.importorskip("importlib_resources", reason="tfds needs importlib_resources to build a dataset")
    import tensorflow_datasets as tfds

    from linscale_jax.data._tf import tf

    splits = {"train": PARAGRAPHS[:16], "validation": PARAGRAPHS[16:]}
    tfds.dataset_builders.store_as_tfds_dataset(
        name="linscale_tiny", version="1.0.0", data_dir=str(tmp_path),
        features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
        split_datasets={k: tf.data.Dataset.from_tensor_slices({"text": v}) for k, v in splits.items()})
    c = files_config("", task="tfds:linscale_tiny:1.0.0", tfds_data_dir=str(tmp_path))
    assert sorted(data.corpus_documents(c.data, "validation")) == splits["validation"]
    it = data.make_iterator(c)
    for _ in range(3):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(3)]
    resumed = data.make_iterator(c)
    resumed.set_state(state)
    for a, b in zip(expected, [next(resumed) for _ in range(3)]):
        np.testing.assert_array_equal(a["targets"], b["targets"])
    for h in range(2):  # two host shards: together every document once
        prepare.prepare(c.data, 32, str(tmp_path / "sharded"), shard=h, shards=2)
    c.data.task = f"records:{tmp_path / 'sharded'}"
    assert sorted(data.corpus_documents(c.data, "train")) == sorted(splits["train"])
    assert sorted(data.corpus_documents(c.data, "validation")) == sorted(splits["validation"])


def test_train_spm_command_and_sentencepiece_vocab(tmp_path):
    corpus = tmp_path / "code.txt"
    corpus.write_text("\n\n".join(f"def f{i}(x):\n    return x * {i}  # {p}" for i, p in enumerate(PARAGRAPHS * 5)))
    out = tmp_path / "spm" / "tiny.model"
    train_spm.main([f"--corpus={corpus}", "--vocab_size=320", f"--out={out}"])
    assert out.exists()
    c = files_config(str(corpus), vocab=f"sentencepiece:{out}")
    with pytest.raises(data.DataError, match="model.vocab_size=259 is smaller.*vocab_size=320"):
        data.make_iterator(c)
    c.model.vocab_size = 320
    vocab = data.get_vocabulary(c.data)
    assert (vocab.vocab_size, vocab.pad_id, vocab.eos_id) == (320, 0, 1)
    text = "def g(y):\n\treturn y  # ünïcode ✓\n"
    assert vocab.decode(vocab.encode(text)) == text  # byte fallback, whitespace kept
    batch = next(data.make_iterator(c))
    assert batch["targets"].max() < 320 and (batch["targets"] > 2).mean() > 0.8
    task = data.get_task(c.data)
    assert task.name.startswith("linscale_files_spm_")
    doc = next(data.corpus_documents(c.data, "validation"))
    example = next(task.get_dataset(sequence_length=None, split="validation", shuffle=False).as_numpy_iterator())
    np.testing.assert_array_equal(example["targets"], tokenize.get(c.data.vocab).encode_with_eos([doc])[0])


def write_tiny_bpe(path):
    """A file in tiktoken's format (base64 token, rank): all bytes plus a few merges."""
    merges = [b"de", b"def", b"re", b"ret", b"  "]
    with open(path, "w") as f:
        for rank, token in enumerate([bytes([i]) for i in range(256)] + merges):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")


def test_cl100k_wrapper_with_a_local_bpe_file(tmp_path, monkeypatch):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setattr(tokenize, "TIKTOKEN_DEFAULT_CACHE", str(tmp_path / "nothing"))
    tokenize.get.cache_clear()
    c = base_config()
    c.data.vocab = "cl100k_base"
    with pytest.raises(data.DataError, match="cl100k_base needs its BPE file.*tiktoken_file"):
        data.get_vocabulary(c.data)
    bpe = tmp_path / "cache" / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"  # tiktoken's cache name
    bpe.parent.mkdir()
    write_tiny_bpe(bpe)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(bpe.parent))
    vocab = data.get_vocabulary(c.data)
    assert (vocab.vocab_size, vocab.eos_id, vocab.pad_id) == (100_280, 100_257, 100_277)
    text = "def ret(x):\n  return x <|endoftext|> ✓"
    ids = vocab.encode(text)
    assert 257 in ids and 259 in ids and vocab.eos_id not in ids  # merges used; special text stays text
    assert vocab.decode(ids) == text
    c.model.vocab_size = 100_280
    batch = next(data.make_iterator(c))
    seg = batch["segment_ids"]
    starts = np.concatenate([np.ones_like(seg[:, :1], bool), seg[:, 1:] != seg[:, :-1]], axis=1)
    assert (batch["inputs"][starts] == 100_277).all()
    doc = list(data.corpus_documents(c.data, "validation"))[0]
    example = next(data.get_task(c.data).get_dataset(sequence_length=None, split="validation",
                                                   shuffle=False).as_numpy_iterator())
    np.testing.assert_array_equal(example["targets"], tokenize.get("cl100k_base").encode_with_eos([doc])[0])
    c.data.tiktoken_file = str(tmp_path / "absent.tiktoken")
    with pytest.raises(data.DataError, match="absent.tiktoken' does not exist"):
        data.get_vocabulary(c.data)
