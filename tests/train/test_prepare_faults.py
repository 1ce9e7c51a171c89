"""Nothing lost: compressed inputs cut short fail in one line naming the file; every decoder error
names the file, the place and the fix; prepared records are published whole (a prepare killed
after its train file keeps the published records, and a run on records that changed refuses);
two prepares of other inputs into one --out refuse; a full disk or a kill -9 leaves no staging
that the next run must step over."""

import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest
from test_prepare import DOCS, config_for, records_documents, write_corpus
from helpers.train import ROOT, tiny_config

from linscale_jax import data
from linscale_jax.data import prepare, publish, records
from linscale_jax.data.errors import DataRefusal

LINES = "".join(json.dumps({"text": d}) + "\n" for d in DOCS).encode()


def prepare_cli(tmp_path, *flags, fault="", background=False):
    env = dict(os.environ, LINSCALE_PREPARE_FAULT=fault)
    cmd = [sys.executable, "-m", "linscale_jax.data.prepare", "--seq_len=32", "--processes=1", "--val_fraction=0",
           *flags]
    if background:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def paused(proc, point="train"):
    """Wait until a prepare started with fault=pause@<point> stops there."""
    for line in proc.stdout:
        if line.startswith(f"paused after {point}"):
            return
    raise AssertionError(f"the prepare ended without pausing (rc {proc.wait()})")


def one_error_line(r, *phrases):
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and r.stderr.startswith("ERROR: "), r.stderr
    for p in phrases:
        assert p in r.stderr, r.stderr


def leftovers(directory):
    """Staging and unpublished versions under a prepared directory."""
    staging = list(directory.rglob(".stage-*"))
    unpublished = [p for p in directory.glob("v-*") if not (p / "shard-00000-of-00001.json").exists()]
    return sorted(str(p.relative_to(directory)) for p in staging + unpublished)


def zstd_cut_at_a_line_boundary(path):
    """A .jsonl.zst whose frame is cut at a block boundary that ends a line (the text read so far
    is whole lines: only the missing frame end tells it is cut short)."""
    import zstandard

    half = LINES[: LINES.index(b"\n", len(LINES) // 2) + 1]
    c = zstandard.ZstdCompressor().compressobj()
    head = c.compress(half) + c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    path.write_bytes(head)
    return len(half)


def cut(path, fraction_or_bytes):
    raw = path.read_bytes()
    n = fraction_or_bytes if isinstance(fraction_or_bytes, int) else int(len(raw) * fraction_or_bytes)
    path.write_bytes(raw[:n])


@pytest.mark.parametrize("name", ["c.txt.zst", "c.jsonl.zst", "c.txt.gz", "c.jsonl.gz", "c.parquet"])
def test_compressed_inputs_cut_short_fail_naming_the_file(tmp_path, name):
    for at in (0, 5, 0.3, 0.5, 0.9, -1, -4):
        path = write_corpus(tmp_path / name)
        size = os.path.getsize(path)
        cut(tmp_path / name, at if isinstance(at, float) else at % size if at < 0 else at)
        with pytest.raises(data.DataError, match=r"cut short|ends early") as e:
            prepare.prepare(config_for(path), 32, str(tmp_path / "out"))
        assert str(e.value).startswith(str(path)) and "copy it again" in str(e.value), (at, str(e.value))
        assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()  # a failed first prepare leaves nothing


def test_a_zstd_frame_cut_at_a_block_and_line_boundary_fails(tmp_path):
    path = tmp_path / "c.jsonl.zst"
    zstd_cut_at_a_line_boundary(path)
    with pytest.raises(data.DataError, match=r"c.jsonl.zst ends early \(the zstd stream stops inside a frame"):
        prepare.prepare(config_for(path), 32, str(tmp_path / "out"))
    import zstandard  # whole frames one after the other are one file: read across them

    frame = zstandard.ZstdCompressor().compress
    path.write_bytes(frame(LINES) + frame(b'{"text": "x"}\n'))
    assert data.corpora.file_documents(str(path), "text", "paragraph")[-2:] == [DOCS[-1], "x"]


def test_decoder_errors_name_the_file_the_place_and_the_fix(tmp_path):
    cases = {
        "surrogate.jsonl": (b'{"text": "ok \\ud83d\\ude00"}\n{"text": "half \\ud800 pair"}\n',
                            r"surrogate.jsonl:2 \(byte offset 28\): field 'text' holds a lone surrogate "
                            r"'\\ud800' at character 5 .* remove line 2"),
        "bad.jsonl": (b'{"text": "ok"}\n{"text": "open\n',
                      r"bad.jsonl:2 is not valid JSON \(Invalid control character at column 15; the line starts at byte offset 15\); .*fix or "
                      "remove line 2"),
        "latin1.jsonl.gz": (gzip.compress(b'{"text": "ok"}\n{"text": "caf\xe9"}\n'),
                            r"latin1.jsonl.gz: not valid UTF-8 at byte offset 28 \(line 2.*iconv"),
        "latin1.txt": (b"fine\n\ncaf\xe9\n", r"latin1.txt: not valid UTF-8 at byte offset 9 \(line 3.*iconv"),
    }
    for name, (raw, pattern) in cases.items():
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(data.DataError, match=pattern):
            prepare.prepare(config_for(tmp_path / name), 32, str(tmp_path / "out"))
    # through the command line: one line, the file named, nothing left behind
    r = prepare_cli(tmp_path, f"--input={tmp_path / 'surrogate.jsonl'}", f"--out={tmp_path / 'out'}")
    one_error_line(r, "surrogate.jsonl:2", "lone surrogate")
    write_corpus(tmp_path / "c.jsonl.gz")
    cut(tmp_path / "c.jsonl.gz", 0.6)
    r = prepare_cli(tmp_path, f"--input={tmp_path / 'c.jsonl.gz'}", f"--out={tmp_path / 'out'}")
    one_error_line(r, f"{tmp_path / 'c.jsonl.gz'} ends early", "copy it again")
    assert not (tmp_path / "out").exists()


def test_auto_prepare_of_a_cut_file_fails_in_the_trainer_naming_it(tmp_path):
    path = tmp_path / "c.jsonl.zst"
    zstd_cut_at_a_line_boundary(path)
    env = dict(os.environ, LINSCALE_DATA_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "linscale_jax.train", "--config=configs/tiny.py:llama-d64",
                        f"--workdir={tmp_path / 'run'}", "--config.data.task=files", f"--config.data.paths={path}",
                        "--config.train.steps=1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    one_error_line(r, f"{path} ends early", "copy it again")
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []
    assert not (tmp_path / "run").exists()


def test_readers_refuse_files_that_disagree_with_dataset_json(tmp_path):
    out = tmp_path / "out"
    prepare.prepare(config_for(write_corpus(tmp_path / "c.jsonl")), 32, str(out))
    manifest = json.loads((out / "dataset.json").read_text())
    train = records.shard_file(out, manifest["version"], "train", 0, 1)
    train.write_bytes(train.read_bytes() + b"\0")
    with pytest.raises(data.DataError, match=f"{train} holds .* bytes, not the .*prepare {out} again"):
        records.Records(str(out), "train")
    records.Records(str(out), "validation")  # the other split is whole
    manifest["files"]["validation"][0]["rows"] += 1
    (out / "dataset.json").write_text(json.dumps(manifest))
    with pytest.raises(data.DataError, match="fingerprint does not match its own file list"):
        records.Records(str(out), "validation")


@pytest.mark.slow  # three short training runs (compiles shared with test_train.py) and two prepare commands
def test_a_prepare_killed_after_its_train_file_keeps_the_records_and_a_run_on_changed_records_refuses(tmp_path):
    corpus, out = tmp_path / "c.jsonl", tmp_path / "records"
    write_corpus(corpus, DOCS * 4)
    prepare.prepare(config_for(corpus, val_fraction=0.2), 32, str(out))
    before = records.Records(str(out), "train").fingerprint
    from linscale_jax.train import loop as trainer

    def run(steps):
        c = tiny_config(steps=steps)
        c.data.task = f"records:{out}"
        c.checkpoint.update(every_steps=2)
        return trainer.train(c, tmp_path / "run")

    run(2)
    write_corpus(corpus, [d.upper() for d in DOCS * 4])  # the same path, other text
    proc = prepare_cli(tmp_path, f"--input={corpus}", f"--out={out}", "--val_fraction=0.2", fault="pause@train",
                       background=True)
    paused(proc)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert records.Records(str(out), "train").fingerprint == before  # the published records, whole
    assert records_documents(out)[:3] == (DOCS * 4)[:3]
    assert len(leftovers(out)) == 2  # the killed version and its staging, for the next prepare to remove
    run(4)  # resumes on the records it was trained on
    r = prepare_cli(tmp_path, f"--input={corpus}", f"--out={out}", "--val_fraction=0.2")
    assert r.returncode == 0, r.stderr
    assert "staging of a prepare that died" in r.stdout and leftovers(out) == []
    assert records.Records(str(out), "train").fingerprint != before
    with pytest.raises(DataRefusal, match=f"the records in {out} differ from those the run was trained on"):
        run(6)


@pytest.mark.slow  # four prepare commands (about 30 s on 2 loaded cores)
def test_two_prepares_of_other_inputs_into_one_out_refuse_and_a_kill_leaves_nothing_in_the_way(tmp_path):
    a = write_corpus(tmp_path / "a.jsonl")
    b = write_corpus(tmp_path / "b.jsonl", [d[::-1] for d in DOCS])
    out = tmp_path / "out"
    first = prepare_cli(tmp_path, f"--input={a}", f"--out={out}", fault="pause@train", background=True)
    paused(first)
    r = prepare_cli(tmp_path, f"--input={b}", f"--out={out}")
    one_error_line(r, f"another prepare is writing other records into {out}")
    first.send_signal(signal.SIGKILL)
    first.wait()
    r = prepare_cli(tmp_path, f"--input={b}", f"--out={out}")  # kill -9 left a version nobody holds
    assert r.returncode == 0 and "left by an earlier prepare" in r.stdout, r.stdout + r.stderr
    assert leftovers(out) == [] and records_documents(out) == [d[::-1] for d in DOCS]
    r = prepare_cli(tmp_path, f"--input={a}", f"--out={out}")  # later, other inputs: refused too
    one_error_line(r, f"{out} holds the records of other inputs", "pass another --out")
    assert records_documents(out) == [d[::-1] for d in DOCS]


def test_a_full_disk_names_what_to_free_and_the_rerun_succeeds(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "c.jsonl")
    out = tmp_path / "out"
    r = prepare_cli(tmp_path, f"--input={corpus}", f"--out={out}", fault="enospc@40")
    one_error_line(r, f"no space left on device while preparing {out}", "prepare removed its partial files",
                   f"free space on the disk of {out}", "re-run the same command")
    assert not out.exists()
    r = prepare_cli(tmp_path, f"--input={corpus}", f"--out={out}")
    assert r.returncode == 0, r.stderr
    assert records_documents(out) == DOCS
    # auto-prepare into the cache: the line names the cache, nothing is left, the next start prepares
    monkeypatch.setenv("LINSCALE_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LINSCALE_PREPARE_FAULT", "enospc@10")
    c = tiny_config()
    c.data.task, c.data.paths, c.data.val_fraction = "files", corpus, 0.2
    with pytest.raises(data.DataError, match=r"no space left.*set \$LINSCALE_DATA_CACHE to a directory on a larger"):
        data.records_dir(c)
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []
    monkeypatch.setenv("LINSCALE_PREPARE_FAULT", "")
    assert len(data.train_rows(c).records) > 0


def test_an_output_without_locks_as_on_gs_publishes_once_every_shard_is_there(tmp_path, monkeypatch):
    """The gs:// path (no flock; staging in $TMPDIR, then a copy), run on a local directory."""
    monkeypatch.setattr(publish, "remote", lambda path: True)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    (tmp_path / "tmp").mkdir()
    files = [write_corpus(tmp_path / f"part{i}.jsonl", DOCS[i::2]) for i in range(2)]
    out = tmp_path / "bucket"
    prepare.prepare(config_for(",".join(files)), 32, str(out), shard=0, shards=2)
    with pytest.raises(data.DataError, match="1 of 2 shards are not prepared.*--shard=1/2"):
        records.Records(str(out), "train")
    prepare.prepare(config_for(",".join(files)), 32, str(out), shard=1, shards=2)
    assert sorted(records_documents(out)) == sorted(DOCS)
    assert list((tmp_path / "tmp").glob("linscale-prepare-*/")) == []
    (out / "v-0123456789abcdef").mkdir()  # an unfinished version of other inputs: no lock tells if it lives
    with pytest.raises(data.DataError, match=r"v-0123456789abcdef holds an unfinished prepare.*gsutil -m rm -r"):
        prepare.prepare(config_for(",".join(files)), 32, str(out), shard=0, shards=2)
