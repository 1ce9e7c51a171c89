"""The lm-eval backend: a local multiple-choice task scored through lm-eval gives acc / acc_norm /
acc_bytes exactly as lm-eval defines them (hand computation from plain forward passes);
loglikelihood_rolling equals the sum of token log-probs of a plain forward; generate_until."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from lm_eval.api.instance import Instance

from linscale_jax.eval.lm_backend import LinscaleLM
from linscale_jax.data._tf import seqio  # seqio through data._tf: TensorFlow set up first (no sklearn)
from linscale_jax.models import ModelConfig, build_model

VOCAB = seqio.ByteVocabulary()  # pad 0, eos 1, bytes 3..258
BOS = VOCAB.pad_id
B = 4  # one batch size everywhere: every backend call below reuses one compiled [4, 64] scorer


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(arch="hgrn2", n_layers=1, d_model=32, n_heads=2, ffn_dim=64, vocab_size=259,
                      max_seq_len=256, init_std=0.2, chunk_size=16)
    return build_model(cfg, rngs=nnx.Rngs(0))


def enc(s):
    return list(VOCAB.encode(s))


_forward = nnx.jit(lambda m, x: jax.nn.log_softmax(m(x), axis=-1))


def forward_logp(model, seq):
    """Plain forward: log p(. | seq[:i+1]) for every i, [len(seq) - 1, vocab]. The input is
    right-padded to a multiple of 64 (fewer compiles; causal, so the real positions are unchanged)."""
    n = len(seq) - 1
    x = np.zeros((1, -(-n // 64) * 64), np.int32)
    x[0, :n] = seq[:-1]
    return np.asarray(_forward(model, jnp.asarray(x)))[0, :n]


def token_logprobs(model, seq):
    """log p(seq[i+1] | seq[:i+1]) for every i, [len(seq) - 1]."""
    return forward_logp(model, seq)[np.arange(len(seq) - 1), seq[1:]]


DOCS = [
    ("Water freezes at", ["zero degrees", "a hot summer afternoon in the desert", "blue"]),
    ("The cat sat on the", ["mat", "éé", "roof of the old red barn", "sofa"]),
    ("Numbers: one two", ["three", "four five six seven", "déjà vu"]),
    ("Paris is the capital of", ["France", "the moon", "ça"]),
    ("Rain falls from", ["clouds", "the sky above the hills", "é"]),
]


def hand_predictions(model):
    """lm-eval's multiple_choice scoring by hand: ll of ' ' + choice after [BOS] + question;
    acc: argmax ll; acc_norm: argmax ll / len(choice) (characters); acc_bytes: / UTF-8 bytes."""
    out = []
    for q, choices in DOCS:
        lls = []
        for c in choices:
            seq = [BOS] + enc(q + " " + c)
            lls.append(float(token_logprobs(model, seq)[-len(enc(" " + c)):].sum()))
        lls = np.array(lls)
        out.append((lls, int(np.argmax(lls)), int(np.argmax(lls / [len(c) for c in choices])),
                    int(np.argmax(lls / [len(c.encode()) for c in choices]))))
    return out


def write_task(tmp_path, labels):
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps({"question": q, "choices": c, "label": int(lab)}) + "\n"
                            for (q, c), lab in zip(DOCS, labels)))
    (tmp_path / "local_mc.yaml").write_text(f"""task: local_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
  - metric: acc_norm
  - metric: acc_bytes
""")


def test_local_multiple_choice_task_through_lm_eval(model, tmp_path, monkeypatch):
    import lm_eval
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    preds = hand_predictions(model)
    # Labels picked so that acc, acc_norm and acc_bytes each get a different share right.
    labels = [preds[0][1], preds[1][2], preds[2][3], preds[3][1], (preds[4][1] + 1) % 3]
    want = {m: np.mean([p[k] == lab for p, lab in zip(preds, labels)])
            for m, k in (("acc", 1), ("acc_norm", 2), ("acc_bytes", 3))}
    write_task(tmp_path, labels)
    lm = LinscaleLM(model=model, vocab=VOCAB, batch_size=B)
    res = lm_eval.simple_evaluate(model=lm, tasks=["local_mc"], torch_random_seed=None,
                                  task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),
                                  log_samples=True)
    got = res["results"]["local_mc"]
    for m in want:
        assert got[f"{m},none"] == pytest.approx(want[m]), m
    # and the per-choice log-likelihoods are the hand ones
    for s in res["samples"]["local_mc"]:
        lls = [r[0] for r in s["filtered_resps"]]
        np.testing.assert_allclose(lls, preds[s["doc_id"]][0], rtol=1e-4, atol=1e-4)


def test_loglikelihood_rolling_equals_plain_forward(model):
    lm = LinscaleLM(model=model, vocab=VOCAB, max_length=64, batch_size=B)
    short = "A short document, forty-odd bytes long."
    ll = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (short,), 0)])[0]
    assert ll == pytest.approx(token_logprobs(model, [BOS] + enc(short)).sum(), rel=1e-5, abs=1e-4)

    long = "Many words follow here, " * 8  # 192 bytes > max_length; 192 inputs = 6 state chunks of 32
    toks = enc(long)
    # window: disjoint windows of 64 predictions, each from its own window only
    want = token_logprobs(model, [BOS] + toks[:64]).sum()
    for start in range(64, len(toks), 64):
        end = min(start + 64, len(toks))
        ctx = toks[end - 65:end]  # the full 64-token input window ending before the last target
        want += token_logprobs(model, ctx)[-(end - start):].sum()
    got = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (long,), 0)])[0]
    assert got == pytest.approx(want, rel=1e-5, abs=1e-3)
    # state: one pass carrying the recurrent state over the whole document
    lm_state = LinscaleLM(model=model, vocab=VOCAB, max_length=64, long_context="state", chunk_size=32)
    got = lm_state.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (long,), 0)])[0]
    assert got == pytest.approx(token_logprobs(model, [BOS] + toks).sum(), rel=1e-5, abs=1e-3)


def test_generate_until(model):
    lm = LinscaleLM(model=model, vocab=VOCAB, max_length=64, batch_size=B, chunk_size=16)
    ctx = "The cat sat on."  # BOS + 15 bytes: one prefill chunk
    new = lm.generator.generate(np.array([[BOS] + enc(ctx)]), 12)[0].tolist()  # tested vs full forwards
    full = VOCAB.decode([t for t in new if t != VOCAB.eos_id][:new.index(1)] if 1 in new else new)
    out = lm.generate_until([Instance("generate_until", {}, (ctx, {"until": [], "max_gen_toks": 12}), 0)])
    assert out == [full]
    if len(full) > 2:
        stop = full[2]
        out = lm.generate_until([Instance("generate_until", {}, (ctx, {"until": [stop], "max_gen_toks": 12}), 0)])
        assert out == [full.split(stop)[0]]


def test_registered_and_bad_arguments():
    from lm_eval.api.registry import get_model

    assert get_model("linscale") is LinscaleLM
    with pytest.raises(ValueError, match="exactly one of workdir"):
        LinscaleLM()
    with pytest.raises(ValueError, match="long_context"):
        LinscaleLM(model=object(), vocab=VOCAB, long_context="bogus")


def test_wikitext_and_lambada_from_local_files(model, tmp_path):
    import math

    from linscale_jax.eval.perplexity import lambada, read_documents, wikitext

    wiki = tmp_path / "wiki.txt"
    wiki.write_text(" = Alpha = \n\n The first article has words . \n\n = = Part = = \n\n More of it . \n"
                    " = Beta = \n\n Second article here . \n")
    docs = read_documents(wiki)
    assert len(docs) == 2 and docs[1].startswith("= Beta =")
    lm = LinscaleLM(model=model, vocab=VOCAB, max_length=128, batch_size=B)
    ll = sum(token_logprobs(model, [BOS] + enc(d)).sum() for d in docs)
    words = sum(len(d.split()) for d in docs)
    got = wikitext(lm, wiki)
    assert got["word_ppl"] == pytest.approx(math.exp(-ll / words), rel=1e-4)
    assert got["bits_per_byte"] == pytest.approx(-ll / math.log(2) / sum(len(d.encode()) for d in docs), rel=1e-4)

    lam = tmp_path / "lambada.jsonl"
    texts = ["the cat sat on the mat", "rain falls from the sky"]
    lam.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    lls, greedy = [], []
    for t in texts:
        ctx, last = t.rsplit(" ", 1)
        seq = [BOS] + enc(ctx + " " + last)
        n = len(enc(" " + last))
        lls.append(token_logprobs(model, seq)[-n:].sum())
        greedy.append(bool((forward_logp(model, seq)[-n:].argmax(-1) == seq[-n:]).all()))
    got = lambada(lm, lam)
    assert got["lambada_ppl"] == pytest.approx(math.exp(-np.mean(lls)), rel=1e-4)
    assert got["lambada_acc"] == np.mean(greedy)
