"""Checkpoint checksums per writing process, hashed in a background thread; a restore by m
processes checks share j of m (the files the process of index j wrote), every byte by exactly one
process; a bit flip is found by the share that owns it. A two-writer step dir is laid out as Orbax
lays it out (ocdbt.process_<k>/, array_metadatas/process_<k>) without running two processes."""

import json
import threading

from linscale_jax.run import checksums


def step_dir(tmp_path, writers=2):
    d = tmp_path / "checkpoints" / "7"
    files = {"metadata/metadata": json.dumps({"step": 7}), "_CHECKPOINT_METADATA": "{}",
             "params/manifest.ocdbt": "m" * 50, "data/metadata": "{}"}
    for k in range(writers):
        files[f"params/ocdbt.process_{k}/d/{k:02d}"] = f"shard {k} " * 1000
        files[f"params/array_metadatas/process_{k}"] = f"meta {k}"
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def flip(path, offset=3):
    b = bytearray(path.read_bytes())
    b[offset] ^= 0x01  # one bit
    path.write_bytes(bytes(b))


def test_each_process_records_the_files_it_wrote(tmp_path):
    d = step_dir(tmp_path)
    r0, r1 = checksums.record(d, 0, 2), checksums.record(d, 1, 2)
    assert set(r1["files"]) == {"params/ocdbt.process_1/d/01", "params/array_metadatas/process_1"}
    assert "params/ocdbt.process_0/d/00" in r0["files"] and "metadata/metadata" in r0["files"]
    assert not set(r0["files"]) & set(r1["files"])
    assert sorted(p.name for p in d.glob("checksums-p*.json")) == ["checksums-p0.json",
                                                                   "checksums-p1.json"]


def test_a_bit_flip_is_found_by_the_share_that_reads_it(tmp_path):
    d = step_dir(tmp_path)
    for k in range(2):
        checksums.record(d, k, 2)
    assert checksums.verify(d, (0, 2)) is None and checksums.verify(d, (1, 2)) is None
    flip(d / "params/ocdbt.process_1/d/01", offset=4000)
    assert checksums.verify(d, (0, 2)) is None  # process 0 does not read process 1's shards
    assert checksums.verify(d, (1, 2)) == "checksum mismatch in params/ocdbt.process_1/d/01"
    assert checksums.verify(d, (0, 1)) is not None  # one process restoring: it reads every file
    assert checksums.verify(d) is not None          # eval / load_model: every file
    flip(d / "params/ocdbt.process_1/d/01", offset=4000)
    flip(d / "metadata/metadata", offset=2)
    assert checksums.verify(d, (0, 2)) == "checksum mismatch in metadata/metadata"


def test_missing_unrecorded_and_unrecorded_writers(tmp_path):
    d = step_dir(tmp_path)
    checksums.record(d, 0, 2)
    # process 1 was killed before its hash: its files go unchecked, the rest is checked
    (d / "params/ocdbt.process_1/d/99").write_text("late")
    assert checksums.verify(d, (0, 1)) is None
    checksums.record(d, 1, 2)
    (d / "params/ocdbt.process_1/d/98").write_text("stray")
    assert checksums.verify(d, (0, 2)) == "unrecorded file params/ocdbt.process_1/d/98"
    (d / "params/ocdbt.process_1/d/98").unlink()
    (d / "params/ocdbt.process_0/d/00").unlink()
    assert checksums.verify(d, (0, 2)) == "file params/ocdbt.process_0/d/00 is missing"


def test_recorder_hashes_in_the_background(tmp_path, monkeypatch):
    """submit() returns while the hash is still running; close() waits for it."""
    d = step_dir(tmp_path, writers=1)
    release, started = threading.Event(), threading.Event()
    digest = checksums._digest

    def slow_digest(path):
        started.set()
        assert release.wait(30)
        return digest(path)

    monkeypatch.setattr(checksums, "_digest", slow_digest)
    rec = checksums.Recorder(0, 1)
    rec.submit(d)
    assert started.wait(30) and not (d / checksums.record_name(0)).exists()
    release.set()
    rec.close()
    assert checksums.verify(d, (0, 1)) is None and checksums.has_record(d)


def test_recorder_survives_a_deleted_step(tmp_path, capsys):
    rec = checksums.Recorder(0, 1)
    rec.submit(tmp_path / "checkpoints" / "3")  # deleted by max_to_keep before its turn
    rec.close()
    assert "WARNING" not in capsys.readouterr().out


def test_scan_agrees_across_processes(tmp_path):
    """scan() passes each verdict through `agree` (distributed.first_problem in the trainer): a
    problem found by another process's share makes the step unusable here too."""
    d = step_dir(tmp_path)
    for k in range(2):
        checksums.record(d, k, 2)
    flip(d / "params/ocdbt.process_1/d/01", offset=10)
    alone = checksums.scan(tmp_path, (0, 2))
    assert alone.good == 7  # share 0 alone cannot see it
    other = checksums.verify(d, (1, 2))
    plan = checksums.scan(tmp_path, (0, 2), agree=lambda mine: mine or other)
    assert plan.good is None and plan.bad == {7: "checksum mismatch in params/ocdbt.process_1/d/01"}
