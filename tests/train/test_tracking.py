"""linscale_jax.train.tracking: Weights & Biases in offline mode (WANDB_MODE=offline, no network).
A tiny run trained, extended on resume and evaluated is one W&B run (the id in DIR/wandb.json),
continued by the resume and the evaluation, in its group, with the run config and every metrics
row; a cooldown branch's rows are a W&B run of their own in the same group. The W&B files are
read back record by record (protobuf Records in LevelDB-log blocks)."""

from __future__ import annotations

import glob
import json
import struct
from pathlib import Path

import pytest

from helpers.train import tiny_config

pytest.importorskip("wandb")


def records(path: str) -> list:
    """The protobuf Records of a .wandb file: a 7-byte header (':W&B', magic, version), then
    LevelDB log records (crc32, length, type) in 32 KiB blocks."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    out, pos, buf, block = [], 7, b"", 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            pos += left
            continue
        buf, pos = buf + data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind in (1, 4):  # a full record, or the last fragment of one
            r = pb.Record()
            r.ParseFromString(buf)
            out.append(r)
            buf = b""
    return out


def sessions(wandb_dir) -> list[dict]:
    """Each offline W&B session, in the order they logged: its run (id, group, job type, name,
    config) and history rows."""
    out = []
    for path in sorted(glob.glob(f"{wandb_dir}/**/offline-run-*/*.wandb", recursive=True)):
        s = dict(rows=[])
        for r in records(path):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                s.update(id=r.run.run_id, group=r.run.run_group, job=r.run.job_type,
                         name=r.run.display_name, project=r.run.project,
                         config={i.key: json.loads(i.value_json) for i in r.run.config.update})
            elif kind == "history":
                s["rows"].append({i.nested_key[0] if i.nested_key else i.key: json.loads(i.value_json)
                                  for i in r.history.item})
        out.append(s)
    return sorted(out, key=lambda s: min((r["_timestamp"] for r in s["rows"]), default=0))


def test_one_wandb_run_per_workdir_resumed_and_evaluated_offline(tmp_path, monkeypatch):
    from linscale_jax.eval.runner import evaluate
    from linscale_jax.train import loop as trainer
    from linscale_jax.study.scaling import cooldown

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    wd = tmp_path / "run"
    c = tiny_config(steps=4, log_every=2)
    c.checkpoint.every_steps = 4
    c.train.update(wandb="linscale-test", wandb_group="study-x")
    trainer.train(c, str(wd))
    c.train.steps = 8  # extend on resume: the same W&B run continues
    assert trainer.train(c, str(wd))["step"] == 8
    evaluate(str(wd), "all", ("val_loss",), ctx_kwargs=dict(val_batches=1))
    cooldown.cooldown(c, str(wd), 8, 0.25, str(wd / "cooldowns" / "8"))
    evaluate(str(wd / "cooldowns" / "8"), "all", ("val_loss",), ctx_kwargs=dict(val_batches=1))

    import wandb

    wandb.teardown()  # the W&B service writes the session files out
    run_id = json.loads((wd / "wandb.json").read_text())["id"]
    got = sessions(tmp_path / "wb")
    assert [s["job"] for s in got] == ["train", "train", "train", "cooldown"]  # eval resumes "train"
    assert [s["id"] for s in got[:3]] == [run_id] * 3 and got[3]["id"] != run_id
    assert {s["group"] for s in got} == {"study-x"} and {s["project"] for s in got} == {"linscale-test"}
    assert got[0]["name"] == c.name and got[3]["name"] == f"{c.name}-cooldown8"
    assert got[0]["config"]["model"]["arch"] == "llama" and got[1]["config"]["train"]["steps"] == 8
    train_rows = [r for s in got[:2] for r in s["rows"]]
    metrics = [json.loads(x) for x in (wd / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/step"] for r in train_rows] == [m["step"] for m in metrics] == [2, 4, 6, 8]
    assert [r["train/loss"] for r in train_rows] == pytest.approx([m["loss"] for m in metrics])
    evals = [json.loads(x) for x in (wd / "eval" / "results.jsonl").read_text().splitlines()]
    assert [r["eval/step"] for r in got[2]["rows"]] == [e["step"] for e in evals] == [4, 8]
    assert [r["eval/val_loss/val_loss"] for r in got[2]["rows"]] == pytest.approx([e["val_loss"] for e in evals])
    assert [r["eval/step"] for r in got[3]["rows"]] == [10]  # the branch: step 8 + 2 cooldown steps
