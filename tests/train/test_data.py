"""Prepared records and the rows of global batches: decoding, packing, order, seek-resume (linscale_jax.data)."""

import json

import numpy as np
import pytest

from linscale_jax import data
from linscale_jax.config import base_config
from linscale_jax.errors import Refusal
from linscale_jax.data import corpora, records, rows as rows_lib, tokenize


def _positions(seg):
    """Index of each position inside its segment (segments are contiguous runs of one id)."""
    idx = np.arange(len(seg))
    starts = np.r_[True, seg[1:] != seg[:-1]]
    return idx - np.maximum.accumulate(np.where(starts, idx, 0))


def write_docs(path, n_docs=30, seed=0):
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "ünï", "✓"]
    docs = [f"doc{i} " + " ".join(rng.choice(words, size=int(rng.integers(1, 25)))) for i in range(n_docs)]
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    return docs


def make_config(tmp_path=None, n_docs=30, seq_len=24, batch_size=4, **data_fields):
    """A config on a small jsonl corpus (distinct documents of varied length) or on stdlib."""
    c = base_config()
    c.model.vocab_size = 259
    c.train.seq_len, c.train.batch_size = seq_len, batch_size
    if tmp_path is not None:
        path = tmp_path / "docs.jsonl"
        write_docs(path, n_docs)
        c.data.task, c.data.paths = "files", str(path)
    c.data.update(data_fields)
    return c


def stream_documents(targets, segs, tok):
    """Documents of packed rows taken in order: concatenate the segments, cut after each EOS."""
    tokens = np.asarray(targets)[np.asarray(segs) > 0]
    cuts = np.flatnonzero(tokens == tok.eos_id) + 1
    return [tok.decode(d[:-1].tolist()) for d in np.split(tokens, cuts)[:-1]]


def all_rows(recs):
    return recs.read(range(len(recs)))


def batches_equal(a, b):
    return all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


def test_stdlib_split_disjoint_and_stable():
    corpus = corpora.stdlib_corpus()
    assert list(corpus.ids) == sorted(corpus.ids) and len(set(corpus.ids)) == len(corpus.ids)
    assert not any("site-packages" in i or "/test/" in f"/{i}" for i in corpus.ids)
    val = {i for i in corpus.ids if corpora.is_validation(i, 0.05)}
    train = set(corpus.ids) - val
    assert 0.01 < len(val) / len(corpus.ids) < 0.12
    assert {i for i in reversed(corpus.ids) if corpora.is_validation(i, 0.05)} == val
    texts = dict(zip(corpus.ids, corpus.texts))
    cfg = base_config().data
    for split, ids in (("validation", val), ("train", train)):
        docs = list(data.corpus_documents(cfg, split))
        assert "".join(docs) == "".join(texts[i] for i in corpus.ids if i in ids)
        assert len(docs) > 2 * len(ids)
    assert val <= {i for i in corpus.ids if corpora.is_validation(i, 0.2)}


def test_pieces_cut_whole_lines_at_blank_lines():
    text = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(200))  # 200 blocks of 29-31 chars
    got = corpora.pieces(text, 100)
    assert "".join(got) == text and len(got) > 10
    assert all(p.endswith("\n\n") and 100 <= len(p) < 140 for p in got[:-1])
    long_block = "x = 1\n" * 100  # no blank line: cut at a line end once 4 * size is reached
    assert [len(p) for p in corpora.pieces(long_block, 25)] == [102] * 5 + [90]
    assert corpora.pieces("", 10) == [] and corpora.pieces("a", 10) == ["a"]


def test_tokenizer_ids_match_the_seqio_task():
    """data.tokenize (what prepare runs) gives the ids of the registered seqio Task's preprocessing."""
    cfg = base_config().data
    task = data.get_task(cfg)
    assert task.name == "linscale_stdlib"
    tok = tokenize.get("byte")
    assert tok.vocab_size == data.get_vocabulary(cfg).vocab_size == 259
    texts = list(data.corpus_documents(cfg, "validation"))[:3]
    ds = task.get_dataset(sequence_length=None, split="validation", shuffle=False)
    for ids, example in zip(tok.encode_with_eos(texts), ds.as_numpy_iterator()):
        np.testing.assert_array_equal(example["targets"], ids)


def test_records_decode_back_to_the_source_documents(tmp_path):
    c = make_config(tmp_path, n_docs=40, val_fraction=0.2)
    tok = tokenize.get("byte")
    for split in ("train", "validation"):
        recs = data.open_records(c, split)
        assert recs.seq_len == 24 and recs.rows == len(recs) > 0
        targets, segs = all_rows(recs)
        source = list(data.corpus_documents(c.data, split))
        assert stream_documents(targets, segs, tok) == source  # packed in source order, nothing lost
        assert recs.documents == len(source)
        assert recs.tokens == int((segs > 0).sum()) == sum(len(d.encode()) + 1 for d in source)
    # a records: task reads the prepared directory itself; its documents decode the same way
    c2 = make_config(tmp_path, task=f"records:{data.records_dir(c)}")
    assert list(data.corpus_documents(c2.data, "train")) == list(data.corpus_documents(c.data, "train"))


def test_packing_is_consistent_with_documents(tmp_path):
    c = make_config(tmp_path, seq_len=16)
    tok = tokenize.get("byte")
    recs = data.open_records(c, "train")
    targets, segs = all_rows(recs)
    batch = records.to_batch(targets, segs, tok.pad_id)
    for row in range(len(targets)):
        seg, inp, tgt = (batch[k][row] for k in ("segment_ids", "inputs", "targets"))
        ids = np.unique(seg[seg > 0])
        assert list(ids) == list(range(1, len(ids) + 1))
        for s in ids:
            span = np.flatnonzero(seg == s)
            assert np.array_equal(span, np.arange(span[0], span[-1] + 1))  # contiguous
            np.testing.assert_array_equal(_positions(seg)[span], np.arange(len(span)))
            assert inp[span[0]] == tok.pad_id
            np.testing.assert_array_equal(inp[span[1:]], tgt[span[:-1]])
        if row < len(targets) - 1:
            assert (seg > 0).all()  # stream packing: only the last row is padded
    pad = batch["segment_ids"] == 0
    assert (batch["weights"][pad] == 0).all() and (batch["weights"][~pad] == 1).all()
    assert (batch["targets"][pad] == tok.pad_id).all() and (batch["inputs"][pad] == tok.pad_id).all()
    # a segment that is not a document's end continues at the start of the next row
    ends_mid = (targets[:, :-1] == tok.eos_id) & (segs[:, 1:] == segs[:, :-1])
    assert not ends_mid.any()


def test_packer_streams_across_calls():
    p = records.Packer(4, pad_id=0)
    docs = [np.array([5, 6, 7, 1]), np.array([8, 1]), np.array([1]), np.array([9, 10, 11, 12, 1])]
    t1, s1 = p.add(docs[:2])
    t2, s2 = p.add(docs[2:])
    t3, s3 = p.finish()
    targets, segs = np.concatenate([t1, t2, t3]), np.concatenate([s1, s2, s3])
    np.testing.assert_array_equal(targets, [[5, 6, 7, 1], [8, 1, 9, 10], [11, 12, 1, 0]])
    np.testing.assert_array_equal(segs, [[1, 1, 1, 1], [1, 1, 2, 2], [1, 1, 1, 0]])


def test_rows_are_a_function_of_seed_step_and_row(tmp_path):
    c = make_config(tmp_path, batch_size=4)
    src = data.train_rows(c)
    full = [src.rows(s, range(4)) for s in range(5)]
    again = data.train_rows(c)
    for s in (4, 0, 2):  # any order, any subset: the same rows
        part = again.rows(s, [3, 1])
        assert all(np.array_equal(part[k], full[s][k][[3, 1]]) for k in part)
    c.data.seed = 1
    assert not np.array_equal(data.train_rows(c).rows(0, range(4))["targets"], full[0]["targets"])
    assert full[0]["inputs"].shape == (4, 24) and full[0]["inputs"].dtype == np.int32
    assert full[0]["weights"].dtype == np.float32


def test_epochs_cover_every_row_once_in_a_new_order(tmp_path):
    c = make_config(tmp_path, n_docs=60, batch_size=1)
    src = data.train_rows(c)
    n = len(src.records)
    epochs = [src.keys(0, range(e * n, (e + 1) * n)) for e in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(n))
    assert epochs[0] != epochs[1]


def test_resume_is_a_seek(tmp_path):
    c = make_config(tmp_path)
    it = data.make_iterator(c)
    for _ in range(7):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert state["step"] == 7 and state["fingerprint"] == data.open_records(c, "train").fingerprint
    expected = [next(it) for _ in range(6)]
    resumed = data.make_iterator(c)
    resumed.set_state(state)
    assert batches_equal([next(resumed) for _ in range(6)], expected)
    assert resumed.get_state() == it.get_state()
    far = dict(state, step=10**9)  # far past many epochs: the same O(1) lookup
    resumed.set_state(far)
    assert next(resumed)["targets"].shape == (4, 24)


def test_state_mismatch_is_refused(tmp_path):
    c = make_config(tmp_path)
    state = data.make_iterator(c).get_state()
    c.data.seed = 5
    with pytest.raises(data.DataError, match="seed"):
        data.make_iterator(c).set_state(state)
    c.data.seed = 0
    write_docs(tmp_path / "docs.jsonl", 30, seed=1)  # the corpus changed: new records, new fingerprint
    with pytest.raises(data.DataError, match="fingerprint.*differ from those the run was trained on") as e:
        data.make_iterator(c).set_state(state)
    assert isinstance(e.value, Refusal)  # refused before the trainer touches the workdir
    c.model.vocab_size = 256
    with pytest.raises(data.DataError, match="model.vocab_size=256.*vocab_size=259"):
        data.train_rows(c)


def test_eval_batches_fixed_and_padded_at_the_end(tmp_path):
    c = make_config(tmp_path, n_docs=30, val_fraction=0.3)
    tok = tokenize.get("byte")
    val = list(data.corpus_documents(c.data, "validation"))
    batches = data.eval_batches(c, "validation", num_batches=50)
    assert batches_equal(batches, data.eval_batches(c, "validation", num_batches=50))
    assert len(batches) < 50  # the split is short: one pass, then stop
    recs = data.open_records(c, "validation")
    assert sum(int((b["segment_ids"] > 0).any(1).sum()) for b in batches) == len(recs)
    last = batches[-1]
    pad = last["segment_ids"] == 0
    assert pad.any() and (last["weights"][pad] == 0).all()
    # every row of the split once, in one order (data.VALIDATION_SEED's) for every data.seed
    order = records.order(len(recs), data.VALIDATION_SEED)
    targets, segs = recs.read([order[i] for i in range(len(recs))])
    got = np.concatenate([b["targets"] for b in batches])[: len(recs)]
    np.testing.assert_array_equal(got, targets)
    assert sorted(stream_documents(*all_rows(recs), tok)) == sorted(val)
    assert len(data.eval_batches(c, "validation", num_batches=2)) == 2
    train0 = data.train_rows(c).rows(0, range(4))["targets"]
    c.data.seed = 3  # a replicate's data order: the training rows change, the validation rows do not
    assert batches_equal(batches, data.eval_batches(c, "validation", num_batches=50))
    assert not np.array_equal(data.train_rows(c).rows(0, range(4))["targets"], train0)
    c.train.batch_size = 8  # twice the batch, half the batches: the same rows (runner.val_batches)
    wide = np.concatenate([b["targets"] for b in data.eval_batches(c, "validation", num_batches=2)])
    np.testing.assert_array_equal(wide, np.concatenate([b["targets"] for b in batches[:4]]))


def test_records_task_checks_vocab_and_seq_len(tmp_path):
    c = make_config(tmp_path)
    c.data.task = f"records:{data.records_dir(c)}"
    data.train_rows(c)
    c.train.seq_len = 32
    with pytest.raises(data.DataError, match="rows of 24 tokens, not train.seq_len=32.*--seq_len=32"):
        data.train_rows(c)
    c.train.seq_len, c.data.vocab = 24, "cl100k_base"
    c.data.tiktoken_file = str(tmp_path / "none")
    with pytest.raises(data.DataError, match="tiktoken_file"):
        data.train_rows(c)
    c.data.task = f"records:{tmp_path / 'nothing'}"
    with pytest.raises(data.DataError, match="no prepared records.*linscale_jax.data.prepare"):
        data.train_rows(c)


def test_auto_prepare_is_cached_and_follows_the_files(tmp_path):
    c = make_config(tmp_path)
    d = data.records_dir(c)
    assert data.records_dir(c) == d  # the second call finds the cache
    write_docs(tmp_path / "docs.jsonl", 31)  # edited input: another cache entry
    assert data.records_dir(c) != d
    c.train.seq_len = 32
    assert rows_lib.records_dir(c) not in (d,)


def test_training_warns_of_repeats_and_refuses_too_few_eval_rows(tmp_path):
    """data.check_training: one warning line with the number of passes when train.steps read the
    train split more than once; a validation split shorter than train.eval_batches, refused."""
    c = make_config(tmp_path, n_docs=30, val_fraction=0.3)
    rows = data.train_rows(c)
    n, held = len(rows.records), -(-len(data.open_records(c, "validation")) // 4)
    c.train.update(steps=n // 4, eval_every=10, eval_batches=held)  # one pass, every eval batch there
    said = []
    data.check_training(c, rows, say=said.append)
    assert said == []
    c.train.steps = 3 * n // 4 + 1  # just over three passes
    data.check_training(c, rows, say=said.append)
    assert len(said) == 1 and said[0].startswith("WARNING: the train split holds"), said
    assert f"read it {(3 * n // 4 + 1) * 4 / n:.1f} times" in said[0] and f"train.steps={n // 4}" in said[0]
    c.train.eval_batches = held + 1
    with pytest.raises(data.DataError, match=rf"fewer than train.eval_batches={held + 1}.*"
                                             rf"--config.train.eval_batches={held}"):
        data.check_training(c, rows, say=said.append)
    c.train.eval_every = 0  # no periodic evaluation: nothing to refuse
    data.check_training(c, rows, say=said.append)
