"""train.stop_at (linscale_jax.train.early_stop): the run stops at the first eval step that meets the
target, saves a checkpoint there marked early_stop, and a resumed run trains no further; the
accuracy it stops on is the share of weighted positions predicted right; a malformed target is one
line. One tiny MQAR run (about 20 s on 2 loaded cores)."""

import json

import numpy as np
import pytest
from helpers.train import tiny_config

from linscale_jax import contract
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.train import early_stop
from linscale_jax.train import loop as trainer


def test_targets_parse_and_meet():
    t = early_stop.parse("val_accuracy>=0.99")
    assert (t.metric, t.target, str(t)) == ("val_accuracy", 0.99, "val_accuracy>=0.99")
    assert t.met(0.99) and not t.met(0.989)
    assert early_stop.parse("val_loss <= 1.5").met(1.2) and early_stop.parse("") is None
    for bad in ("val_accuracy<=0.9", "accuracy>=0.9", "val_loss>=2", "val_accuracy>0.9"):
        with pytest.raises(early_stop.StopTargetError, match="is not a stop condition; write one of"):
            early_stop.parse(bad)


def mqar_config(steps=12, **train):
    c = tiny_config(steps=steps, eval_every=4, eval_batches=2, **train)
    c.data.update(task="mqar", seed=0)
    c.data.mqar = dict(n_pairs="2", n_keys=8, n_values=8, placement="uniform")
    c.model.vocab_size = 17
    c.checkpoint.every_steps = 8
    return c


def test_a_run_stops_at_its_target_saves_there_and_resumes_to_nothing(tmp_path):
    wd = tmp_path / "run"
    c = mqar_config(stop_at="val_accuracy>=0.0")  # met at the first eval step
    out = trainer.train(c, wd)
    assert out["step"] == 4 and out["stopped"] is None
    assert ckpt.list_steps(wd) == [4]  # saved at the stop, not only at the schedule's steps
    meta = ckpt.load_metadata(wd, 4)["early_stop"]
    assert meta["metric"] == "val_accuracy" and meta["target"] == 0.0 and meta["step"] == 4
    rows = [json.loads(x) for x in (wd / contract.METRICS).read_text().splitlines()]
    evals = [r for r in rows if "val_accuracy" in r]
    assert [r["step"] for r in evals] == [4] and 0.0 <= evals[0]["val_accuracy"] <= 1.0
    assert meta["value"] == evals[0]["val_accuracy"]
    again = trainer.train(c, wd)  # resumed: the stop holds, nothing more is trained
    assert again["step"] == 4 and ckpt.list_steps(wd) == [4]
    # the accuracy the stop reads: argmax hits over the weighted positions, counted by hand
    from linscale_jax import data

    model = ckpt.load_model(wd, 4)[0]
    hits = total = 0
    for b in data.eval_batches(c, "validation", 2):
        logits = np.asarray(model(b["inputs"], segment_ids=b["segment_ids"]))
        q = b["weights"] > 0
        hits += int(((logits.argmax(-1) == b["targets"]) & q).sum())
        total += int(q.sum())
    assert evals[0]["val_accuracy"] == pytest.approx(hits / total)


def test_a_target_needs_validation_steps(tmp_path):
    c = mqar_config(stop_at="val_loss<=1")
    c.train.eval_every = 0
    with pytest.raises(early_stop.StopTargetError, match="train.eval_every=0"):
        trainer.train(c, tmp_path / "run")
