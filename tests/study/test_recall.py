"""MQAR data source (layout, answer-only weights, exact resume) and the recall study's shrunk run
through the documented command (recall.csv columns, plot, report section)."""

import csv
import os
import subprocess
import sys

import ml_collections
import numpy as np
import pytest

from linscale_jax.data import DataError, make_iterator, mqar
from study import recall

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_sequences_layout_and_answer_only_weights():
    rng = np.random.default_rng(0)
    b = mqar.batch(rng, 16, 31, 8, n_keys=20, n_values=5)
    for i in range(16):
        x = np.concatenate([b["inputs"][i], b["targets"][i][-1:]])
        keys, values = x[0:16:2], x[1:16:2]
        assert len(set(keys)) == 8 and keys.min() >= 1 and keys.max() <= 20
        assert values.min() >= 21 and values.max() <= 25
        q = np.flatnonzero(b["weights"][i])
        assert len(q) == 8 and q.min() >= 16
        assert sorted(b["inputs"][i][q]) == sorted(keys)  # every key asked once
        store = dict(zip(keys, values))
        assert all(b["targets"][i][t] == store[b["inputs"][i][t]] for t in q)  # answer = stored value
        rest = np.setdiff1d(np.arange(16, 32), np.concatenate([q, q + 1]))
        assert np.all(x[rest] == 0)
    with pytest.raises(DataError, match="seq_len >= 63"):
        mqar.batch(rng, 1, 31, 16, 64, 64)


def test_iterator_is_deterministic_and_resumes_exactly():
    c = ml_collections.ConfigDict(dict(
        data=dict(task="mqar", seed=3, mqar=dict(n_pairs="2,4", n_keys=16, n_values=16)),
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


def test_recall_study_command_shrunk(tmp_path):
    wd = tmp_path / "recall"
    wd.mkdir()
    (wd / "report.md").write_text("# Study\n\n## Other section\n\nkept\n")
    args = [sys.executable, "-m", "study", "--config=configs/study/recall.py", f"--workdir={wd}",
            "--config.archs=llama,tnl", "--config.sizes=d32", "--config.n_pairs=2,4", "--config.seq_len=32",
            "--config.steps=12", "--config.batch_size=8", "--config.warmup_steps=2", "--config.eval_sequences=16"]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = list(csv.DictReader(open(wd / "recall.csv")))
    assert list(rows[0])[:7] == ["arch", "d_model", "n_pairs", "seq_len", "accuracy", "ci_low", "ci_high"]
    assert {(r["arch"], r["n_pairs"]) for r in rows} == {(a, p) for a in ("llama", "tnl") for p in ("2", "4")}
    for r in rows:
        assert 0 <= float(r["ci_low"]) <= float(r["accuracy"]) <= float(r["ci_high"]) <= 1
        assert int(r["queries"]) == 16 * int(r["n_pairs"]) and r["d_model"] == "32" and r["seq_len"] == "32"
    assert (wd / "recall.png").stat().st_size > 1000
    report = (wd / "report.md").read_text()
    assert "## Other section\n\nkept" in report and report.count(recall.SECTION) == 1
    assert "![MQAR accuracy](recall.png)" in report and "Does LLaMA lead on retrieval?" in report
    recall.update_report(str(wd / "report.md"), recall.SECTION + "\n\nnew\n")  # replaced, not appended
    report = (wd / "report.md").read_text()
    assert report.count(recall.SECTION) == 1 and "new" in report and "kept" in report
