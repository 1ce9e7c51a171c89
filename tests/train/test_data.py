"""Data pipeline: split, determinism, exact resume, host sharding, packing (linscale_jax.data)."""

import json

import numpy as np
import pytest

from linscale_jax import data
from linscale_jax.config import base_config
from linscale_jax.data import corpora, pipeline



def _positions(seg):
    """Index of each position inside its segment (segments are contiguous runs of one id)."""
    idx = np.arange(len(seg))
    starts = np.r_[True, seg[1:] != seg[:-1]]
    return idx - np.maximum.accumulate(np.where(starts, idx, 0))

def make_config(tmp_path=None, n_docs=30, seq_len=24, batch_size=4, **data_fields):
    """A config on a small jsonl corpus (distinct documents of varied length) or on stdlib."""
    c = base_config()
    c.model.vocab_size = 259
    c.train.seq_len, c.train.batch_size = seq_len, batch_size
    if tmp_path is not None:
        rng = np.random.default_rng(0)
        words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
        path = tmp_path / "docs.jsonl"
        with open(path, "w") as f:
            for i in range(n_docs):
                text = f"doc{i} " + " ".join(rng.choice(words, size=int(rng.integers(1, 25))))
                f.write(json.dumps({"text": text}) + "\n")
        c.data.task, c.data.paths = "files", str(path)
    c.data.update(data_fields)
    return c


def stream_documents(batches, vocab):
    """Rebuild documents from packed batches: concatenate the segments row by row, cut after each EOS."""
    tokens = np.concatenate([b["targets"][b["weights"] > 0] for b in batches])
    cuts = np.flatnonzero(tokens == vocab.eos_id) + 1
    return [vocab.decode(d[:-1].tolist()) for d in np.split(tokens, cuts)[:-1]]


def batches_equal(a, b):
    return all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


def test_stdlib_split_disjoint_and_stable():
    corpus = corpora.stdlib_corpus()
    assert list(corpus.ids) == sorted(corpus.ids) and len(set(corpus.ids)) == len(corpus.ids)
    assert not any("site-packages" in i or "/test/" in f"/{i}" for i in corpus.ids)
    val = {i for i in corpus.ids if corpora.is_validation(i, 0.05)}
    train = set(corpus.ids) - val
    assert 0.01 < len(val) / len(corpus.ids) < 0.12
    # Membership depends on the id only: the same in any listing order and for any other listing.
    assert {i for i in reversed(corpus.ids) if corpora.is_validation(i, 0.05)} == val
    assert {i for i in list(val)[:3] + ["not/a/file.py"] if corpora.is_validation(i, 0.05)} >= set(list(val)[:3])
    texts = dict(zip(corpus.ids, corpus.texts))
    cfg = base_config().data
    # The pipeline's documents are the files' pieces, in file order: they rebuild the split's files.
    for split, ids in (("validation", val), ("train", train)):
        docs = list(data.corpus_documents(cfg, split))
        assert "".join(docs) == "".join(texts[i] for i in corpus.ids if i in ids)
        assert len(docs) > 2 * len(ids)
    # A larger val_fraction only moves documents from train to validation.
    assert val <= {i for i in corpus.ids if corpora.is_validation(i, 0.2)}


def test_pieces_cut_whole_lines_at_blank_lines():
    text = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(200))  # 200 blocks of 29-31 chars
    got = corpora.pieces(text, 100)
    assert "".join(got) == text and len(got) > 10
    assert all(p.endswith("\n\n") and 100 <= len(p) < 140 for p in got[:-1])
    long_block = "x = 1\n" * 100  # no blank line: cut at a line end once 4 * size is reached
    assert [len(p) for p in corpora.pieces(long_block, 25)] == [102] * 5 + [90]
    assert corpora.pieces("", 10) == [] and corpora.pieces("a", 10) == ["a"]


def test_task_preprocessing_matches_pipeline_tokens():
    """The registered seqio Task's own tokenize+EOS gives the ids the Python packer uses."""
    cfg = base_config().data
    task = data.get_task(cfg)
    assert task.name == "linscale_stdlib"
    vocab = data.get_vocabulary(cfg)
    assert vocab.vocab_size == 259
    encode = pipeline.tokenizer(vocab)
    texts = list(data.corpus_documents(cfg, "validation"))[:3]
    ds = task.get_dataset(sequence_length=None, split="validation", shuffle=False)
    for text, example in zip(texts, ds.as_numpy_iterator()):
        np.testing.assert_array_equal(example["targets"], encode(text))
        assert list(encode(text)) == list(vocab.encode(text)) + [vocab.eos_id]


def test_batches_deterministic_given_seed():
    c = make_config(seq_len=64)
    a, b = data.make_iterator(c), data.make_iterator(c)
    first = [next(a) for _ in range(3)]
    assert batches_equal(first, [next(b) for _ in range(3)])
    assert first[0]["inputs"].shape == (4, 64) and first[0]["inputs"].dtype == np.int32
    assert first[0]["weights"].dtype == np.float32
    c.data.seed = 1
    assert not np.array_equal(next(data.make_iterator(c))["targets"], first[0]["targets"])


@pytest.mark.parametrize("late", [False, True])
def test_resume_is_exact(tmp_path, late):
    c = make_config(tmp_path)
    it = data.make_iterator(c)
    for _ in range(3):
        next(it)
    while late and not (it.get_state()["epoch"] >= 2 and it.get_state()["offset"] > 0):
        next(it)  # after epoch turnovers, in the middle of a document
    state = json.loads(json.dumps(it.get_state()))
    expected = [next(it) for _ in range(6)]
    resumed = data.make_iterator(c)
    resumed.set_state(state)
    assert batches_equal([next(resumed) for _ in range(6)], expected)
    assert resumed.get_state() == it.get_state()


def test_epochs_reshuffle_and_cover_split(tmp_path):
    c = make_config(tmp_path, n_docs=30)
    vocab = data.get_vocabulary(c.data)
    it = data.make_iterator(c)
    batches = []
    while it.get_state()["epoch"] < 2:
        batches.append(next(it))
    docs = stream_documents(batches, vocab)
    train = list(data.corpus_documents(c.data, "train"))
    n = len(train)
    epoch0, epoch1 = docs[:n], docs[n : 2 * n]
    assert sorted(epoch0) == sorted(train) == sorted(epoch1)
    assert epoch0 != epoch1  # a new order every epoch


def test_host_sharding_partitions_documents(tmp_path):
    hosts = 3
    c = make_config(tmp_path, n_docs=40, batch_size=6)
    vocab = data.get_vocabulary(c.data)
    train = list(data.corpus_documents(c.data, "train"))
    seen = []
    for h in range(hosts):
        it = data.make_iterator(c, host_index=h, host_count=hosts)
        batches = []
        while it.get_state()["epoch"] == 0:
            batches.append(next(it))
        assert batches[0]["inputs"].shape == (2, 24)
        docs = stream_documents(batches, vocab)[: len(range(h, len(train), hosts))]
        seen.append(docs)
    flat = [d for docs in seen for d in docs]
    assert sorted(flat) == sorted(train)  # union is the split, no document twice
    assert all(set(a).isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1 :])


def test_packing_is_consistent_with_documents(tmp_path):
    c = make_config(tmp_path, seq_len=16)
    vocab = data.get_vocabulary(c.data)
    it = data.make_iterator(c)
    batches = [next(it) for _ in range(12)]
    for b in batches:
        for row in range(b["targets"].shape[0]):
            seg, inp, tgt, w = (b[k][row] for k in ("segment_ids", "inputs", "targets", "weights"))
            pos = _positions(seg)
            ids = np.unique(seg)
            assert list(ids) == list(range(1, len(ids) + 1))  # stream packing: no padding in training
            for s in ids:
                span = np.flatnonzero(seg == s)
                assert np.array_equal(span, np.arange(span[0], span[-1] + 1))  # contiguous
                np.testing.assert_array_equal(pos[span], np.arange(len(span)))
                assert inp[span[0]] == vocab.pad_id
                np.testing.assert_array_equal(inp[span[1:]], tgt[span[:-1]])
            np.testing.assert_array_equal(w, 1.0)
        # a segment that is not a document's end continues at the next row (and ends before the last column)
        ends_mid = (b["targets"][:, :-1] == vocab.eos_id) & (b["segment_ids"][:, 1:] == b["segment_ids"][:, :-1])
        assert not ends_mid.any()
    # The segments, in order, are exactly the documents of the shuffled epoch with EOS appended.
    order = pipeline.raw_documents(data.get_task(c.data), "train", shuffle=True, seed=pipeline.epoch_seed(0, 0),
                                   host_index=0, host_count=1)
    rebuilt = stream_documents(batches, vocab)
    assert rebuilt == [next(order) for _ in rebuilt] and len(rebuilt) > 5


def test_eval_batches_fixed_and_padded_at_the_end(tmp_path):
    c = make_config(tmp_path, n_docs=30, val_fraction=0.3)
    vocab = data.get_vocabulary(c.data)
    val = list(data.corpus_documents(c.data, "validation"))
    batches = data.eval_batches(c, "validation", num_batches=50)
    assert batches_equal(batches, data.eval_batches(c, "validation", num_batches=50))
    assert len(batches) < 50  # the split is short: one pass, then stop
    last = batches[-1]
    pad = last["segment_ids"] == 0
    assert pad.any() and (last["weights"][pad] == 0).all() and (last["targets"][pad] == vocab.pad_id).all()
    rebuilt = stream_documents(batches, vocab)  # complete, in data.seed's fixed permutation
    assert sorted(rebuilt) == sorted(val) and rebuilt != val
    order = pipeline.raw_documents(data.get_task(c.data), "validation", shuffle=True,
                                   seed=pipeline.epoch_seed(c.data.seed, 0), host_index=0, host_count=1)
    assert rebuilt == list(order)
    assert len(data.eval_batches(c, "validation", num_batches=2)) == 2


def test_state_mismatch_and_batch_errors(tmp_path):
    c = make_config(tmp_path)
    state = data.make_iterator(c).get_state()
    c.data.seed = 5
    with pytest.raises(data.DataError, match="seed"):
        data.make_iterator(c).set_state(state)
    c.train.batch_size = 6
    with pytest.raises(data.DataError, match="not divisible by host_count=4.*multiple of 4"):
        data.make_iterator(c, host_index=0, host_count=4)
    c.model.vocab_size = 256
    with pytest.raises(data.DataError, match="model.vocab_size=259"):
        data.make_iterator(c)
