"""python -m linscale_jax.eval on a run's checkpoints: a val_loss row per checkpoint, re-runs add nothing, NIAH and
probe rows, the export table, the workdir lm-eval backend, and the clear errors."""

import csv
import importlib.util
import json
import math
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml
from flax import nnx

from linscale_jax.eval import runner
from linscale_jax.eval.__main__ import main as eval_main
from linscale_jax.eval.export import main as export_main
from linscale_jax.eval.loading import EvalError
from linscale_jax.run import checkpoint as ckpt
from linscale_jax import data
from linscale_jax.models import ModelConfig, build_model

STEPS = (0, 4, 8)


def tiny_config(arch="tnl"):
    spec = importlib.util.spec_from_file_location("tiny_cfg", os.path.join(
        os.path.dirname(__file__), "..", "..", "configs", "tiny.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config(f"{arch}-d64")
    c.model.update(n_layers=1, max_seq_len=512)
    c.train.update(seq_len=128, batch_size=2, eval_batches=1)
    return c


def save_run(workdir, arch, steps, seed0=0):
    config = tiny_config(arch)
    for i, s in enumerate(steps):
        model = build_model(ModelConfig.from_config(config.model), rngs=nnx.Rngs(seed0 + i))
        ckpt.save_model(str(workdir), model, config, step=s)
    return config


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """One tiny tnl run with three checkpoints (different weights), written once via ckpt.save_model."""
    wd = tmp_path_factory.mktemp("run")
    save_run(wd, "tnl", STEPS)
    return str(wd)


def hand_val_loss(workdir, step, config):
    model, _, _ = ckpt.load_model(workdir, step)
    forward = nnx.jit(lambda m, x, s: jax.nn.log_softmax(m(x, segment_ids=s), axis=-1))
    nll = n = 0.0
    for b in data.eval_batches(config, split="validation", num_batches=1):
        logp = np.asarray(forward(model, jnp.asarray(b["inputs"]), jnp.asarray(b["segment_ids"])))
        tok = np.take_along_axis(logp, b["targets"][..., None], axis=-1)[..., 0]
        nll -= float((tok * b["weights"]).sum())
        n += float(b["weights"].sum())
    return nll / n


def test_val_loss_row_per_checkpoint_and_rerun_adds_nothing(run_dir, tmp_path):
    rows = runner.evaluate(run_dir, tasks="val_loss", ctx_kwargs=dict(val_batches=1), log=lambda s: None)
    assert [r["step"] for r in rows] == list(STEPS)
    meta = ckpt.load_metadata(run_dir, 8)
    for r in rows:
        assert r["task"] == "val_loss" and r["arch"] == "tnl" and r["run"] == meta["run"]
        assert r["n_params"] == meta["n_params"] and r["tokens"] == 2 * 128 * r["step"]
        assert r["flops"] == pytest.approx(ckpt.load_metadata(run_dir, r["step"])["flops"])
        assert math.isfinite(r["val_loss"]) and r["val_ppl"] == pytest.approx(math.exp(r["val_loss"]))
        assert 0 < r["val_bpb"] < 20
    assert len({round(r["val_loss"], 6) for r in rows}) == 3  # different weights, different losses
    config = ckpt.config_from_metadata(meta)
    assert rows[-1]["val_loss"] == pytest.approx(hand_val_loss(run_dir, 8, config), rel=1e-5)
    # byte vocabulary: every scored token is one byte, so bpb = loss / ln 2
    assert rows[-1]["val_bpb"] == pytest.approx(rows[-1]["val_loss"] / math.log(2), rel=2e-2)

    lines = open(runner.results_path(run_dir)).read().splitlines()
    assert eval_main(["--workdir", run_dir, "--val_batches=1"]) == 0  # the CLI: nothing left to do
    assert open(runner.results_path(run_dir)).read().splitlines() == lines

    with open(runner.results_path(run_dir), "a") as f:  # a torn last line (killed run) is dropped
        f.write('{"task": "val_lo')
    assert runner.evaluate(run_dir, tasks="val_loss", log=lambda s: None) == []
    assert open(runner.results_path(run_dir)).read().splitlines() == lines

    out = tmp_path / "table.csv"
    assert export_main([f"--workdir={run_dir}", f"--out={out}"]) == 0
    table = list(csv.DictReader(open(out)))
    assert list(table[0])[:7] == ["arch", "run", "step", "n_params", "tokens", "flops", "loss"]
    assert [float(t["loss"]) for t in table] == pytest.approx([r["val_loss"] for r in rows])


def test_niah_and_probe_rows(run_dir):
    assert eval_main(["--workdir", run_dir, "--steps=last", "--tasks=niah_easy,probe",
                      "--niah_grid=2x3", "--probe_items=8"]) == 0
    rows = [r for r in runner.read_results(run_dir) if r["task"] in ("niah_easy", "probe")]
    niah, probe = rows
    assert niah["step"] == 8 and niah["niah_mode"] == "easy"
    assert 0.0 <= niah["niah_score"] <= niah["niah_weighted_acc"] <= 1.0
    assert "acc@250" in niah and "acc<=250" in niah  # seq_len 128: up to 250 tokens (~2x)
    assert open(niah["niah_heatmap"], "rb").read(4) == b"\x89PNG"
    grid = json.load(open(niah["niah_heatmap"].replace(".png", ".json")))
    assert np.asarray(grid["scores"]).shape == (2, 3)
    assert probe["probe_items"] == 8 and 0.0 <= probe["probe_acc"] <= 1.0


def test_lm_backend_from_workdir(run_dir):
    from lm_eval.api.instance import Instance

    from linscale_jax.eval.lm_backend import LinscaleLM

    lm = LinscaleLM.create_from_arg_string(f"workdir={run_dir},step=4")  # what --model_args does
    assert lm.max_length == 128
    model, _, _ = ckpt.load_model(run_dir, 4)
    text = "def main():"
    ids = [0] + list(lm.vocab.encode(text))
    logp = nnx.jit(lambda m, x: jax.nn.log_softmax(m(x), axis=-1))(model, jnp.asarray([ids[:-1]]))[0]
    want = float(np.asarray(logp)[np.arange(len(ids) - 1), ids[1:]].sum())
    got = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])[0]
    assert got == pytest.approx(want, rel=1e-5)


def test_task_group_configs_name_real_lm_eval_tasks():
    import lm_eval

    from linscale_jax.eval.commonsense import COMMONSENSE_METRICS, SCROLLS_METRICS, TASKS_DIR

    root = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    known = set()
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".yaml"):
                for line in open(os.path.join(d, f), encoding="utf-8"):
                    if line.startswith("task: "):
                        known.add(line.split(":", 1)[1].strip())
    for name, metrics in (("linscale_commonsense", COMMONSENSE_METRICS), ("linscale_scrolls", SCROLLS_METRICS)):
        cfg = yaml.safe_load(open(os.path.join(TASKS_DIR, f"{name}.yaml")))
        assert cfg["group"] == name and cfg["task"] == list(metrics)
        assert set(cfg["task"]) <= known


def test_clear_errors(run_dir, tmp_path):
    with pytest.raises(EvalError, match="does not exist"):
        runner.evaluate(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvalError, match="no complete checkpoints"):
        runner.evaluate(str(tmp_path / "empty"))
    with pytest.raises(EvalError, match="unknown task"):
        runner.evaluate(run_dir, tasks="val_loss,mmlu")
    with pytest.raises(EvalError, match=r"step\(s\) \[7\]"):
        runner.evaluate(run_dir, steps="4,7")
    bad = tmp_path / "lambada.jsonl"
    bad.write_text('{"text": "the cat sat on the mat"}\n{"text": oops}\n')
    with pytest.raises(EvalError, match=r"lambada.jsonl:2 is not valid JSON"):
        runner.evaluate(run_dir, steps="last", tasks="lambada", ctx_kwargs=dict(lambada=str(bad)))
    assert eval_main(["--workdir", str(tmp_path / "nope")]) == 1

    mixed = tmp_path / "mixed"
    save_run(mixed, "tnl", [0])
    save_run(mixed, "hgrn2", [5])
    with pytest.raises(EvalError, match="another architecture/config"):
        runner.evaluate(str(mixed))


def test_corrupt_checkpoint_is_skipped_by_eval_and_refused_by_generate(run_dir, tmp_path, capsys):
    """Flipped bytes in one checkpoint: eval skips that checkpoint (the others are evaluated) and
    generate refuses it with a one-line error instead of an empty continuation with rc 0; generate
    names the step it loaded."""
    from linscale_jax.eval.generate import main as generate_main

    assert generate_main([f"--workdir={run_dir}", "--prompt=a", "--max_new_tokens=2"]) == 0
    assert f"[{run_dir} step 8]" in capsys.readouterr().err
    wd = tmp_path / "run"
    shutil.copytree(run_dir, wd)
    for f in (wd / "checkpoints" / "4" / "params").rglob("*"):
        if f.is_file() and f.stat().st_size > 16:
            b = bytearray(f.read_bytes())
            b[len(b) // 2] ^= 0xFF
            f.write_bytes(bytes(b))
    if os.path.exists(runner.results_path(str(wd))):
        os.remove(runner.results_path(str(wd)))
    logs = []
    with pytest.raises(runner.DamagedCheckpoints) as e:
        runner.evaluate(str(wd), tasks="val_loss", ctx_kwargs=dict(val_batches=1), log=logs.append)
    assert [r["step"] for r in runner.read_results(str(wd))] == [s for s in STEPS if s != 4]
    assert sum("WARNING: skipping checkpoint step 4: " in line and "checksum mismatch" in line
               for line in logs) == 1
    assert "\n" not in str(e.value) and "1 checkpoint(s)" in str(e.value) and "step 4: " in str(e.value)
    assert generate_main([f"--workdir={wd}", "--step=4", "--prompt=a"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ERROR: ") and "checksum mismatch" in err


def test_validation_set_read_once_per_process_and_again_when_the_data_changes(run_dir, tmp_path, monkeypatch):
    from linscale_jax.eval import val_loss

    calls = []
    real = data.eval_batches
    monkeypatch.setattr(data, "eval_batches", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(val_loss, "_VAL_SETS", {})
    model4, config, _ = ckpt.load_model(run_dir, 4)
    vocab = data.get_vocabulary(config.data)
    a = val_loss.validation_loss(model4, config, vocab, 1)
    b = val_loss.validation_loss(ckpt.load_model(run_dir, 8)[0], config, vocab, 1)
    assert len(calls) == 1  # the checkpoints of a run share one validation set
    assert a["val_bytes"] == b["val_bytes"] and a["val_loss"] != b["val_loss"]
    assert b["val_loss"] == pytest.approx(hand_val_loss(run_dir, 8, config), rel=1e-5)

    corpus = tmp_path / "corpus.txt"  # a local corpus rewritten in place is asked for again
    corpus.write_text("".join(f"document {i}: the quick brown fox.\n\n" for i in range(400)))
    config.data.update(task="files", paths=str(corpus), val_fraction=0.5)
    calls.clear()
    first = val_loss.validation_loss(model4, config, vocab, 1)
    assert val_loss.validation_loss(model4, config, vocab, 1) == first and len(calls) == 1
    corpus.write_text("".join(f"another text number {i}, longer than before!\n\n" for i in range(400)))
    second = val_loss.validation_loss(model4, config, vocab, 1)
    assert len(calls) == 2 and second["val_tokens"] > 0


def test_eval_command_skips_a_damaged_checkpoint_evaluates_the_rest_and_exits_1(run_dir, tmp_path):
    """A real `python -m linscale_jax.eval` on a run whose middle checkpoint was cut short with no
    checksum record (a kill just before the hash; its array files gone): one line naming that step
    and what is wrong, the other steps evaluated, exit status 1 with the skipped step named; a rerun
    adds no rows and says the same. (About 25 s on 2 cores: two short processes.)"""
    import subprocess
    import sys

    wd = tmp_path / "run"
    shutil.copytree(run_dir, wd)
    shutil.rmtree(wd / "eval", ignore_errors=True)  # rows other tests of the module wrote
    step = wd / "checkpoints" / "4"
    for f in step.glob("checksums-p*.json"):
        f.unlink()
    for f in (step / "params").rglob("*"):
        if f.is_file() and f.name != "_METADATA" and f.stat().st_size > 16:
            f.unlink()
    cmd = [sys.executable, "-m", "linscale_jax.eval", f"--workdir={wd}", "--tasks=val_loss", "--val_batches=1"]
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    for attempt in (1, 2):
        p = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
        lines = [x for x in (p.stdout + p.stderr).splitlines() if x.strip()]
        errors = [x for x in lines if x.startswith("ERROR: ")]
        assert p.returncode == 1 and len(errors) == 1, lines
        assert sum(x.startswith("WARNING: skipping checkpoint step 4: ") for x in lines) == 1, lines
        assert "1 checkpoint(s) of" in errors[0] and "(step 4: " in errors[0], errors
        assert [r["step"] for r in runner.read_results(str(wd))] == [0, 8]
        assert ("2 new row(s)" if attempt == 1 else "no other checkpoint had rows left") in errors[0]


def test_an_older_checkpoint_without_newer_model_fields_is_the_same_model():
    """A run resumed across a version that added model fields (stored as absent in its early
    checkpoints, at their defaults in its late ones) is one model; a changed width is not."""
    new = {"arch": "cosformer2", "d_model": 32, "n_heads": 2, "n_layers": 2, "layers": "",
           "gdn": {"expand_v": 2, "conv_size": 4}}
    old = {k: v for k, v in new.items() if k not in ("layers", "gdn")}
    metas = {512: {"config": {"model": old}}, 6144: {"config": {"model": new}}}
    runner.check_same_model("W", metas)
    metas[512]["config"]["model"] = {**old, "d_model": 48}
    with pytest.raises(EvalError, match=r"step 512 in W comes from another architecture/config .*d_model: 48 vs 32"):
        runner.check_same_model("W", metas)
