"""MQAR data source (layout, distinct values, power-law placement, exact resume) and the recall study:
cell statuses (did not train, copy level, recall), the positive control per shape and what the
verdict may use, variant labels and usable state, the learning-rate file, a run through the
trainer's step, and a shrunk run through the documented commands (sweep, then preset)."""

import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import ml_collections
import numpy as np
import pytest

from linscale_jax.data import DataError, make_iterator, mqar
from linscale_jax.study import recall
from linscale_jax.study.scaling import findings
from linscale_jax.study.recall import rates, table, train

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
    lo, hi = table.wilson(50, 100)
    assert abs(lo - 0.4038) < 1e-3 and abs(hi - 0.5962) < 1e-3
    assert table.wilson(10, 10)[1] > 1 - 1e-12 and table.wilson(0, 10)[0] < 1e-12


def test_did_not_train_copy_level_and_recall():
    ln64 = math.log(64)
    assert table.did_not_train(ln64, 64, 0.1) and table.did_not_train(ln64 - 0.05, 64, 0.1)
    assert table.did_not_train(ln64 + 1.0, 64, 0.1) and table.did_not_train(float("nan"), 64, 0.1)
    assert not table.did_not_train(math.log(8), 64, 0.1)  # copies a value from the context
    assert table.cell_status(table.Status.DID_NOT_TRAIN, 0.9, 4) == "did_not_train"
    assert table.cell_status(table.Status.TRAINED, 0.25, 4) == "copy_level"  # the interval reaches 1/4
    assert table.cell_status(table.Status.TRAINED, 0.1, 4) == "copy_level"  # below the copy level too
    assert table.cell_status(table.Status.TRAINED, 0.2501, 4) == "recall"


def test_best_lr_counts_accuracy_up_to_the_target_then_prefers_fewer_steps():
    from types import SimpleNamespace as R

    runs = [R(name=f"r{lr}", arch="tnl", d_model=16, head_dim=8, lr=lr) for lr in (1e-3, 3e-3, 1e-2)]
    res = {"r0.001": dict(val_accuracy=0.995, steps=2000), "r0.003": dict(val_accuracy=0.991, steps=1100),
           "r0.01": dict(val_accuracy=0.4, steps=2000)}
    assert table.best_lr(runs, res, 0.99) == {("tnl", 16, 8): 3e-3}  # both reached 0.99; 3e-3 sooner
    assert table.best_lr(runs, res, 0.999) == {("tnl", 16, 8): 1e-3}  # below the target: accuracy decides
    # read after fewer steps (the preset's) from the validation history: 1e-2 leads at step 500
    res["r0.001"]["history"] = [dict(step=s, val_accuracy=a) for s, a in ((500, 0.3), (1000, 0.6), (2000, 0.995))]
    res["r0.003"]["history"] = [dict(step=s, val_accuracy=a) for s, a in ((500, 0.2), (1000, 0.9), (1100, 0.991))]
    res["r0.01"]["history"] = [dict(step=s, val_accuracy=a) for s, a in ((500, 0.35), (1000, 0.4), (2000, 0.4))]
    assert table.best_lr(runs, res, 0.99, at=lambda label: 700) == {("tnl", 16, 8): 1e-2}
    assert table.best_lr(runs, res, 0.99, at=lambda label: 1000) == {("tnl", 16, 8): 3e-3}
    assert table.accuracy_at(res["r0.003"], 1500) == (0.991, 1100)  # stopped early: its final
    assert table.accuracy_at(res["r0.001"], 1999) == (0.6, 1000)


def _study(**kw):
    from configs.study.recall import get_config

    c = get_config()
    c.update(dict(archs="llama,tnl", shapes="d16e8", baseline_shapes="d16e8", n_pairs="2,4", seq_len=32,
                  n_keys=16, n_values=16, max_steps=8, batch_size=8, warmup_steps=2, eval_every=4,
                  val_sequences=16, eval_sequences=16, seeds="0,1", workers=1, lr="3e-3"), **kw)
    return c


def _fake(accs, loss=1.0):
    return dict(settings={}, steps=8, stopped_early=False, val_accuracy=float(np.mean(accs)),
                test_loss=loss, seconds=1.0,
                status=table.Status.DID_NOT_TRAIN if table.did_not_train(loss, 16, 0.1) else table.Status.TRAINED,
                per_pairs={str(p): dict(correct=int(a * 100), queries=100, loss=loss)
                           for p, a in zip((2, 4), accs)})


def test_variants_shapes_and_usable_state(tmp_path):
    """A variant label runs the changed model and keeps its label; the baseline runs at its own
    shapes; TNL's usable state counts only the heads whose decay spans the context."""
    study = _study(archs="llama,tnl,tnl+short_conv=4,hgrn2", shapes="d16e4,d16e8", baseline_shapes="d16e8",
                   baseline_max_steps=12)
    runs = train.build_runs(study, str(tmp_path))
    assert {(r.arch, r.steps) for r in runs} == {("llama", 12), ("tnl", 8), ("tnl+short_conv=4", 8), ("hgrn2", 8)}
    assert [(r.arch, r.head_dim) for r in runs if r.seed == 0] == [
        ("llama", 8), ("tnl", 4), ("tnl", 8), ("tnl+short_conv=4", 4), ("tnl+short_conv=4", 8),
        ("hgrn2", 4), ("hgrn2", 8)]
    by = {(r.arch, r.head_dim): r for r in runs if r.seed == 0}
    assert by["tnl+short_conv=4", 8].variant == "short_conv=4" and by["tnl", 8].variant == ""
    assert by["tnl", 8].state_floats == 2 * 8 * 8  # h·e·e
    assert by["tnl+short_conv=4", 8].state_floats == 2 * 8 * 8 + 3 * 3 * 16  # + the last 3 inputs
    # paper decay rule: head 0 (λ = 1) spans the context in every layer, the others decay within tokens
    assert by["tnl", 8].usable_state_floats == 8 * 8 and by["tnl", 4].usable_state_floats == 4 * 4
    assert by["tnl+short_conv=4", 8].usable_state_floats == 8 * 8 + 3 * 3 * 16
    assert by["hgrn2", 4].usable_state_floats == by["hgrn2", 4].state_floats == 4 * 4 * 4
    assert by["tnl+short_conv=4", 8].config.model.short_conv == 4
    c = by["llama", 8].config  # the trainer's config: MQAR data, the optimizer, the early stop
    assert c.optim.lr == 3e-3 and c.data.task == "mqar" and c.data.seed == 0 and c.train.stop_at == "val_accuracy>=0.99"
    assert by["hgrn2", 4].config.data.mqar.n_pairs == [2, 4] and c.train.eval_batches == 2


def test_learning_rates_from_the_rates_file(tmp_path):
    path = tmp_path / "rates.json"
    rates.write(str(path), dict(rates={"llama": 1e-3, "tnl+short_conv=4": 3e-3}))
    study = _study(lr="", rates=str(path))
    assert train.learning_rates(study, "tnl+short_conv=4") == [3e-3]
    with pytest.raises(ValueError, match="no rate for 'hgrn2'"):
        train.learning_rates(study, "hgrn2")
    shipped = json.loads((Path(ROOT) / "linscale_jax" / "configs" / "study" / "recall_rates.json").read_text())
    assert train.learning_rates(_study(lr=""), "tnl") == [shipped["rates"]["tnl"]]  # the preset's: packaged data
    with pytest.raises(FileNotFoundError, match="--config=recall_sweep"):
        train.learning_rates(_study(lr="", rates=str(tmp_path / "none.json")), "tnl")
    assert train.learning_rates(_study(lr="llama:1e-3,tnl+short_conv=4:1e-4/1e-2"), "tnl+short_conv=4") == [1e-4, 1e-2]


def test_cells_control_per_shape_and_verdict_input(tmp_path):
    """Seed rows + the seed "all" row per cell, each with a status; the control needs a baseline
    recall cell >= 0.9 and counts only in its (d_model, pairs); copy-level and untrained cells never
    reach the verdict's rows; a sweep records its rates."""
    study = _study(archs="llama,tnl,hgrn2", lr="llama:1e-3/3e-3,tnl:3e-3,hgrn2:3e-3")
    runs = train.build_runs(study, str(tmp_path))
    assert [r.name for r in runs][:4] == ["llama-d16e8-s0-lr0.001", "llama-d16e8-s1-lr0.001",
                                          "llama-d16e8-s0-lr0.003", "llama-d16e8-s1-lr0.003"]
    accs = {"llama-d16e8-s0-lr0.001": (0.5, 0.4), "llama-d16e8-s1-lr0.001": (0.5, 0.4),
            "llama-d16e8-s0-lr0.003": (0.95, 0.7), "llama-d16e8-s1-lr0.003": (0.91, 0.5),
            "hgrn2-d16e8-s0-lr0.003": (0.8, 0.3), "hgrn2-d16e8-s1-lr0.003": (0.7, 0.2)}
    results = {r.name: _fake(accs.get(r.name, (0.06, 0.06)),
                             math.log(16) if r.arch == "tnl" and r.seed == 1 else 1.0) for r in runs}
    rows = table.cell_rows(runs, results, study)
    path = str(tmp_path / "recall.csv")
    table.write_csv(rows, path)
    got = list(csv.DictReader(open(path)))
    assert list(got[0])[:9] == ["arch", "d_model", "n_pairs", "seq_len", "accuracy", "ci_low",
                                "ci_high", "state_floats", "seed"]
    assert {"status", "variant", "usable_state_floats"} <= set(got[0])
    assert [(r["arch"], r["n_pairs"], r["seed"], r["lr"]) for r in got][:3] == [
        ("llama", "2", "0", "0.0030"), ("llama", "2", "1", "0.0030"), ("llama", "2", "all", "0.0030")]
    status = {(r["arch"], r["n_pairs"], r["seed"]): r["status"] for r in got}
    assert status["llama", "2", "all"] == "recall" and status["tnl", "2", "all"] == "did_not_train"
    assert status["tnl", "2", "0"] == "copy_level"  # 0.06 < 1/2, trained
    assert status["hgrn2", "2", "all"] == "recall" and status["hgrn2", "4", "all"] == "copy_level"
    top = next(r for r in rows if r["seed"] == "all" and r["arch"] == "llama" and r["n_pairs"] == 2)
    assert top["accuracy"] == pytest.approx(0.93)  # seed mean; interval spans both seeds' Wilson
    assert top["ci_low"] == pytest.approx(table.wilson(91, 100)[0])
    assert top["ci_high"] == pytest.approx(table.wilson(95, 100)[1])
    v = recall.verdict_input(path)
    assert v["control"]["met"] and v["control"]["passed"] == [(16, 2)]  # not at 4 pairs (0.6)
    assert [(r["arch"], r["n_pairs"]) for r in v["rows"]] == [("llama", 2), ("hgrn2", 2)]
    assert ("hgrn2", 16, 8, 4, "copy_level") in v["left_out"] and ("llama", 16, 8, 4, "no control") in v["left_out"]
    assert v["did_not_train"] == [("tnl", 16, 8, 2), ("tnl", 16, 8, 4)]
    verdict, lines = findings.retrieval(v, path)
    assert verdict.startswith("**reproduced**") and "hgrn2 e8" in "\n".join(lines)
    section = recall.report.report_section(rows, study, None, path).splitlines()  # the answer first
    assert section[2].startswith("**Summary (3. llama leads on retrieval): reproduced: LLaMA's MQAR accuracy")
    row = next(i for i, x in enumerate(section) if x.startswith("| 16 | 2 | Δ llama − hgrn2 e8 | +0.1"))
    assert row < 10 and "| tnl |" not in section[row]
    (left,) = [x for x in lines if x.startswith("Left out")]
    assert "tnl d16 e8 P=2 (did not train)" in left and "(copy level)" in left
    assert not any(x.startswith("Beside the verdict") for x in lines)
    # a variant's recall result is shown beside the verdict, never counted in it
    conv = [dict(r, arch="hgrn2+short_conv=4", variant="short_conv=4") for r in rows if r["arch"] == "hgrn2"]
    table.write_csv(rows + conv, path)
    verdict_conv, lines_conv = findings.retrieval(recall.verdict_input(path), path)
    assert verdict_conv == verdict
    (beside,) = [x for x in lines_conv if x.startswith("Beside the verdict")]
    assert "llama − hgrn2+short_conv=4 e8 at d 16, 2 pairs +0.180" in beside
    # a linear run that stopped early at the target accuracy is still compared with the control
    stopped = {n: dict(r, steps=5, stopped_early=True) if n.startswith("hgrn2") else r
               for n, r in results.items()}
    table.write_csv(table.cell_rows(runs, stopped, study), path)
    assert [r["arch"] for r in recall.verdict_input(path)["rows"]] == ["llama", "hgrn2"]
    # a linear recall result allowed fewer steps than the control trained is not compared with it
    short = [dataclasses.replace(r, steps=4) if r.arch == "hgrn2" else r for r in runs]
    table.write_csv(table.cell_rows(short, results, study), path)
    assert {r["max_steps"] for r in table.read_csv(path) if r["arch"] == "hgrn2"} == {4}
    old = tmp_path / "old.csv"  # a recall.csv without a column: one line naming it and the fix
    with open(path) as f, open(old, "w", newline="") as g:
        w = csv.DictWriter(g, fieldnames=[c for c in table.COLUMNS if c != "max_steps"], extrasaction="ignore")
        w.writeheader()
        w.writerows(csv.DictReader(f))
    with pytest.raises(ValueError, match="lacks the columns max_steps; re-run the recall study"):
        recall.verdict_input(str(old))
    v_short = recall.verdict_input(path)
    assert [r["arch"] for r in v_short["rows"]] == ["llama"]
    assert ("hgrn2", 16, 8, 2, table.FEWER_STEPS) in v_short["left_out"]
    verdict_short = findings.retrieval(v_short, path)[0]
    assert verdict_short.startswith("**not measured**: no linear") and "--config.max_steps=8`" in verdict_short
    table.write_csv(rows, path)
    rec = rates.record(runs, results, table.best_lr(runs, results, 0.99), study)
    assert rec["rates"] == {"llama": 3e-3, "tnl": 3e-3, "hgrn2": 3e-3} and rates.is_sweep(runs)
    assert rec["sweep"]["llama"] == {"0.001": 0.45, "0.003": 0.765} and rec["shape"] == "d16e8"
    # no linear recall result: finding 3 is not measured; the baseline below 0.9: not measured either
    for name in accs:
        if name.startswith("hgrn2"):
            accs[name] = (0.3, 0.2)
    table.write_csv(table.cell_rows(runs, {r.name: _fake(accs.get(r.name, (0.06, 0.06))) for r in runs},
                                    study), path)
    assert findings.retrieval(recall.verdict_input(path), path)[0].startswith("**not measured**: no linear")
    for name in accs:
        accs[name] = (0.6, 0.3)
    table.write_csv(table.cell_rows(runs, {r.name: _fake(accs.get(r.name, (0.06, 0.06))) for r in runs},
                                    study), path)
    v = recall.verdict_input(path)
    assert not v["control"]["met"] and v["control"]["best"] == pytest.approx(0.6)
    verdict, _ = findings.retrieval(v, path)
    assert verdict.startswith("**not measured**") and "0.600" in verdict
    section = recall.report.report_section(table.read_csv(path), study, None, path)
    assert section.splitlines()[2].startswith("**Summary (3. llama leads on retrieval): not measured (Positive "
                                              "control not met: LLaMA's best cell") and "Δ llama" not in section


def test_untrained_run_through_the_trainer_is_did_not_train_and_resumes_to_its_scores(tmp_path):
    """A real run (a trainer run on data.task=mqar) whose loss stays at ln(n_values): lr so small
    nothing is learnt; run again, it resumes from its checkpoint and scores the same."""
    study = _study(archs="tnl+short_conv=4", seeds="0", lr="1e-7", max_steps=4)
    run = train.build_runs(study, str(tmp_path))[0]
    res = train.train_run(study, run, log=lambda m: None)
    assert res["test_loss"] > math.log(16) - 0.1 and res["status"] == table.Status.DID_NOT_TRAIN
    assert res["steps"] == 4 and not res["stopped_early"] and len(res["history"]) == 1
    assert res["settings"]["model"]["short_conv"] == 4 and res["settings"]["optim"]["lr"] == 1e-7
    # a trainer run: its checkpoint, and a second call (the result lost) trains nothing more
    from linscale_jax.run import checkpoint as ckpt

    assert ckpt.list_steps(run.workdir) == [4]
    again = train.train_run(study, run, log=lambda m: None)
    assert ckpt.list_steps(run.workdir) == [4] and again["steps"] == 4
    assert again["test_loss"] == res["test_loss"] and again["per_pairs"] == res["per_pairs"]


@pytest.mark.slow
def test_recall_sweep_then_preset_commands_shrunk(tmp_path):
    """The sweep writes recall_rates.json; the preset reads it (rates per label) and reports the
    sweep; a second run retrains nothing."""
    sweep, wd = tmp_path / "sweep", tmp_path / "recall"
    wd.mkdir()
    (wd / "report.md").write_text("# Study\n\n## Other section\n\nkept\n")
    shrink = ["--config.archs=llama,tnl+short_conv=4", "--config.shapes=d16e8", "--config.baseline_shapes=d16e8",
              "--config.n_pairs=2,4", "--config.seq_len=32", "--config.max_steps=8", "--config.batch_size=8",
              "--config.warmup_steps=2", "--config.eval_every=4", "--config.val_sequences=16",
              "--config.eval_sequences=16", "--config.n_keys=16", "--config.n_values=16",
              "--config.workers=1", "--config.baseline_max_steps=12"]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "linscale_jax.study", "--config=configs/study/recall_sweep.py",
                          f"--workdir={sweep}", *shrink, "--config.lr=1e-3/3e-3", "--config.sweep_steps=12"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rec = json.load(open(sweep / "recall_rates.json"))
    assert set(rec["rates"]) == {"llama", "tnl+short_conv=4"} and set(rec["sweep"]["llama"]) == {"0.001", "0.003"}
    assert "recall_sweep.py" in rec["command"] and rec["run_seconds"] > 0
    # every label trained 12 steps; tnl's rate read at the preset's 8 (its history), llama's at 12
    assert rec["final"]["tnl+short_conv=4"]["0.001"][1] == 12 and rec["steps"]["tnl+short_conv=4"]["0.001"] == 8
    assert rec["steps"]["llama"]["0.001"] == 12 and rec["settings"]["sweep_steps"] == "12"
    args = [sys.executable, "-m", "linscale_jax.study", "--config=configs/study/recall.py", f"--workdir={wd}", *shrink,
            "--config.seeds=0,1", f"--config.rates={sweep / 'recall_rates.json'}"]
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = list(csv.DictReader(open(wd / "recall.csv")))
    assert {(r["arch"], r["n_pairs"], r["seed"]) for r in rows} == {
        (a, p, s) for a in ("llama", "tnl+short_conv=4") for p in ("2", "4") for s in ("0", "1", "all")}
    for r in rows:
        assert 0 <= float(r["ci_low"]) <= float(r["accuracy"]) <= float(r["ci_high"]) <= 1
        assert r["status"] in table.STATUSES and float(r["lr"]) == rec["rates"][r["arch"]]
        assert int(r["queries"]) == (2 if r["seed"] == "all" else 1) * 16 * int(r["n_pairs"])
        assert r["variant"] == ("short_conv=4" if r["arch"] != "llama" else "")
    assert (wd / "recall.png").stat().st_size > 1000
    runs = list(csv.DictReader(open(wd / "recall_runs.csv")))
    assert len(runs) == 4 and {(r["arch"], r["steps"]) for r in runs} <= {("llama", "12"), ("tnl+short_conv=4", "8")}
    report = (wd / "report.md").read_text()
    assert "## Other section\n\nkept" in report and report.count(recall.SECTION) == 1
    assert "![MQAR accuracy against state size](recall.png)" in report and "Positive control" in report
    assert "Learning rates from the sweep" in report and "| tnl+short_conv=4 |" in report
    again = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "4 run(s), 4 finished already" in again.stdout  # nothing retrained
    recall.update_report(str(wd / "report.md"), recall.SECTION + "\n\nnew\n")  # replaced, not appended
    report = (wd / "report.md").read_text()
    assert report.count(recall.SECTION) == 1 and "new" in report and "kept" in report
