"""MQAR data source (layout, distinct values, power-law placement, exact resume) and the recall study:
"did not train" detection, the positive control and seed rows, and a shrunk run through the
documented command (recall.csv columns, plot, report section, resume)."""

import csv
import math
import os
import subprocess
import sys

import ml_collections
import numpy as np
import pytest

from linscale_jax.data import DataError, make_iterator, mqar
from study import findings, recall

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_sequences_layout_and_answer_only_weights():
    rng = np.random.default_rng(0)
    b = mqar.batch(rng, 16, 31, 8, n_keys=20, n_values=9)
    for i in range(16):
        x = np.concatenate([b["inputs"][i][:1], b["targets"][i]])
        keys, values = x[0:16:2], x[1:16:2]
        assert len(set(keys)) == 8 and keys.min() >= 1 and keys.max() <= 20
        assert len(set(values)) == 8 and values.min() >= 21 and values.max() <= 29  # distinct values
        q = np.flatnonzero(b["weights"][i])
        assert len(q) == 8 and q.min() >= 16
        assert sorted(b["inputs"][i][q]) == sorted(keys)  # every key asked once
        store = dict(zip(keys, values))
        assert all(b["targets"][i][t] == store[b["inputs"][i][t]] for t in q)  # answer = stored value
        assert np.all(b["inputs"][i][q[q + 1 < 31] + 1] == 0)  # answers are never inputs (Zoology)
        np.testing.assert_array_equal(b["inputs"][i][:16], x[:16])
        rest = np.setdiff1d(np.arange(16, 32), np.concatenate([q, q + 1]))
        assert np.all(x[rest] == 0)
    with pytest.raises(DataError, match="seq_len >= 63"):
        mqar.batch(rng, 1, 31, 16, 64, 64)
    with pytest.raises(DataError, match="n_values >= 8"):
        mqar.batch(rng, 1, 31, 8, 20, 5)


def test_power_law_placement_puts_queries_near_the_pairs():
    """Zoology's a·s^(a-1) slot law: slot 1 (right after the pairs) is 1/(a·S^(a-1)) times as likely
    as slot S, so the queries sit earlier than under uniform placement, by a known amount."""
    p, seq_len, n = 2, 64, 4000
    slots = (seq_len + 1 - 2 * p) // 2
    probs = mqar.slot_probabilities(slots, "power", 0.01)
    assert probs[0] / probs[-1] == pytest.approx(slots ** 0.99) and probs.sum() == pytest.approx(1)
    assert mqar.slot_probabilities(slots, "uniform") is None
    mean_slot = {}
    for placement in ("uniform", "power"):
        b = mqar.batch(np.random.default_rng(1), n, seq_len, p, 16, 16, placement, 0.01)
        rows, cols = np.nonzero(b["weights"])
        mean_slot[placement] = float(np.mean((cols - 2 * p) // 2))
    assert mean_slot["uniform"] == pytest.approx((slots - 1) / 2, abs=0.3)
    # power: first query slot ~ probs, second drawn without replacement; the mean lies well below
    assert mean_slot["power"] < mean_slot["uniform"] - 3
    c = ml_collections.ConfigDict(dict(data=dict(task="mqar", seed=0, mqar=dict(placement="near")),
                                       train=dict(batch_size=4, seq_len=32)))
    with pytest.raises(DataError, match="placement='near': choose one of"):
        make_iterator(c)


def test_iterator_is_deterministic_and_resumes_exactly():
    c = ml_collections.ConfigDict(dict(
        data=dict(task="mqar", seed=3, mqar=dict(n_pairs="2,4", n_keys=16, n_values=16,
                                                 placement="power")),
        train=dict(batch_size=4, seq_len=32), model=dict(vocab_size=64)))
    it = make_iterator(c)
    first = [next(it) for _ in range(3)]
    state = it.get_state()
    nxt = next(it)
    again = make_iterator(c)
    again.set_state(state)
    np.testing.assert_array_equal(next(again)["inputs"], nxt["inputs"])
    assert set(np.asarray(first[0]["weights"]).sum(1)) <= {2.0, 4.0}
    c.model.vocab_size = 20
    with pytest.raises(DataError, match="vocab_size=20 < 33"):
        make_iterator(c)


def test_wilson_interval():
    lo, hi = recall.wilson(50, 100)
    assert abs(lo - 0.4038) < 1e-3 and abs(hi - 0.5962) < 1e-3
    assert recall.wilson(10, 10)[1] > 1 - 1e-12 and recall.wilson(0, 10)[0] < 1e-12


def test_did_not_train_is_a_loss_at_the_values_marginal():
    ln64 = math.log(64)
    assert recall.did_not_train(ln64, 64, 0.1) and recall.did_not_train(ln64 - 0.05, 64, 0.1)
    assert recall.did_not_train(ln64 + 1.0, 64, 0.1) and recall.did_not_train(float("nan"), 64, 0.1)
    assert not recall.did_not_train(math.log(8), 64, 0.1)  # copies a value from the context


def _study(**kw):
    from configs.study.recall import get_config

    c = get_config()
    c.update(dict(archs="llama,tnl", shapes="d16e8", n_pairs="2,4", seq_len=32, n_keys=16,
                  n_values=16, max_steps=8, batch_size=8, warmup_steps=2, eval_every=4,
                  val_sequences=16, eval_sequences=16, seeds="0,1", workers=1), **kw)
    return c


def _fake(run, accs, loss=1.0):
    return dict(settings={}, steps=100, stopped_early=False, val_accuracy=float(np.mean(accs)),
                test_loss=loss, seconds=1.0,
                status=recall.DID_NOT_TRAIN if recall.did_not_train(loss, 16, 0.1) else recall.TRAINED,
                per_pairs={str(p): dict(correct=int(a * 100), queries=100, loss=loss)
                           for p, a in zip((2, 4), accs)})


def test_cells_control_and_verdict_input(tmp_path):
    """Seed rows + the seed "all" row per cell; the control needs a trained LLaMA cell >= 0.9;
    a run at ln(n_values) is "did_not_train" and never reaches the verdict's rows."""
    study = _study(lr="llama:1e-3/3e-3,tnl:3e-3")
    runs = recall.build_runs(study, str(tmp_path))
    assert [r.name for r in runs] == ["llama-d16e8-s0-lr0.001", "llama-d16e8-s1-lr0.001",
                                      "llama-d16e8-s0-lr0.003", "llama-d16e8-s1-lr0.003",
                                      "tnl-d16e8-s0-lr0.003", "tnl-d16e8-s1-lr0.003"]
    assert [r.state_floats for r in runs] == [2 * 16 * 32] * 4 + [2 * 8 * 8] * 2  # KV cache; h·e·e
    accs = {"llama-d16e8-s0-lr0.001": (0.5, 0.4), "llama-d16e8-s1-lr0.001": (0.5, 0.4),
            "llama-d16e8-s0-lr0.003": (0.95, 0.7), "llama-d16e8-s1-lr0.003": (0.91, 0.5)}
    results = {r.name: _fake(r, accs.get(r.name, (0.06, 0.06)),
                             math.log(16) if r.arch == "tnl" and r.seed == 1 else 1.0) for r in runs}
    rows = recall.cell_rows(runs, results, study)
    path = str(tmp_path / "recall.csv")
    recall.write_csv(rows, path)
    table = list(csv.DictReader(open(path)))
    assert list(table[0])[:9] == ["arch", "d_model", "n_pairs", "seq_len", "accuracy", "ci_low",
                                  "ci_high", "state_floats", "seed"]
    assert [(r["arch"], r["n_pairs"], r["seed"], r["lr"]) for r in table][:3] == [
        ("llama", "2", "0", "0.0030"), ("llama", "2", "1", "0.0030"), ("llama", "2", "all", "0.0030")]
    top = next(r for r in rows if r["seed"] == "all" and r["arch"] == "llama" and r["n_pairs"] == 2)
    assert top["accuracy"] == pytest.approx(0.93)  # seed mean; interval spans both seeds' Wilson
    assert top["ci_low"] == pytest.approx(recall.wilson(91, 100)[0])
    assert top["ci_high"] == pytest.approx(recall.wilson(95, 100)[1])
    v = recall.verdict_input(path)
    assert v["control"]["met"] and v["control"]["best"] == pytest.approx(0.93)
    assert {(r["arch"], r["n_pairs"]) for r in v["rows"]} == {("llama", 2), ("llama", 4)}
    assert v["did_not_train"] == [("tnl", 16, 8, 2), ("tnl", 16, 8, 4)]
    verdict, lines = findings.retrieval(v, path)
    assert verdict.startswith("**partly reproduced**") and "did not train" in lines[-1].lower()
    # LLaMA below 0.9 everywhere: the comparison is not measured
    for name in accs:
        accs[name] = (0.6, 0.3)
    results = {r.name: _fake(r, accs.get(r.name, (0.06, 0.06))) for r in runs}
    recall.write_csv(recall.cell_rows(runs, results, study), path)
    v = recall.verdict_input(path)
    assert not v["control"]["met"] and v["control"]["best"] == pytest.approx(0.6)
    verdict, _ = findings.retrieval(v, path)
    assert verdict.startswith("**not measured**") and "0.600" in verdict


def test_untrained_run_is_reported_did_not_train(tmp_path):
    """A real run whose loss stays at (or above) ln(n_values): lr so small nothing is learnt."""
    study = _study(archs="llama", seeds="0", lr="1e-7", max_steps=4)
    run = recall.build_runs(study, str(tmp_path))[0]
    res = recall.train_run(study, run, log=lambda m: None)
    assert res["test_loss"] > math.log(16) - 0.1 and res["status"] == recall.DID_NOT_TRAIN
    assert res["steps"] == 4 and not res["stopped_early"] and len(res["history"]) == 1


@pytest.mark.slow
def test_recall_study_command_shrunk(tmp_path):
    wd = tmp_path / "recall"
    wd.mkdir()
    (wd / "report.md").write_text("# Study\n\n## Other section\n\nkept\n")
    args = [sys.executable, "-m", "study", "--config=configs/study/recall.py", f"--workdir={wd}",
            "--config.archs=llama,tnl", "--config.shapes=d16e8", "--config.n_pairs=2,4",
            "--config.seq_len=32", "--config.max_steps=8", "--config.batch_size=8",
            "--config.warmup_steps=2", "--config.eval_every=4", "--config.val_sequences=16",
            "--config.eval_sequences=16", "--config.n_keys=16", "--config.n_values=16",
            "--config.seeds=0,1", "--config.workers=1", "--config.lr=3e-3"]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = list(csv.DictReader(open(wd / "recall.csv")))
    assert list(rows[0])[:9] == ["arch", "d_model", "n_pairs", "seq_len", "accuracy", "ci_low", "ci_high",
                                 "state_floats", "seed"]
    assert {(r["arch"], r["n_pairs"], r["seed"]) for r in rows} == {
        (a, p, s) for a in ("llama", "tnl") for p in ("2", "4") for s in ("0", "1", "all")}
    for r in rows:
        assert 0 <= float(r["ci_low"]) <= float(r["accuracy"]) <= float(r["ci_high"]) <= 1
        assert r["d_model"] == "16" and r["seq_len"] == "32" and r["status"] in ("ok", "did_not_train")
        assert int(r["queries"]) == (2 if r["seed"] == "all" else 1) * 16 * int(r["n_pairs"])
        assert int(r["state_floats"]) == (2 * 16 * 32 if r["arch"] == "llama" else 2 * 8 * 8)
    assert (wd / "recall.png").stat().st_size > 1000
    assert len(list(csv.DictReader(open(wd / "recall_runs.csv")))) == 4
    report = (wd / "report.md").read_text()
    assert "## Other section\n\nkept" in report and report.count(recall.SECTION) == 1
    assert "![MQAR accuracy against state size](recall.png)" in report and "Positive control" in report
    again = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "4 runs (4 stored)" in again.stdout  # nothing retrained
    recall.update_report(str(wd / "report.md"), recall.SECTION + "\n\nnew\n")  # replaced, not appended
    report = (wd / "report.md").read_text()
    assert report.count(recall.SECTION) == 1 and "new" in report and "kept" in report
