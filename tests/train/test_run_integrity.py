"""Run integrity under injected faults: each test injects one way a workdir can be mixed, shared,
silently corrupted or stuck, and checks the behaviour: a one-line refusal that
leaves the workdir byte-identical, or a recovery whose continuation equals an uninterrupted run.

Faults: a model / batch / lr change on resume, a second trainer, bytes flipped in params, opt_state
and metadata, a missing file, an empty step dir, a full disk (writes fail), divergence, Ctrl-C,
--init_from on a run with checkpoints, convert into a run, a failed start."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import orbax.checkpoint as ocp
import pytest
from helpers.train import ROOT, cli_overrides, snapshot, tiny_config

from linscale_jax.run import checkpoint as ckpt
from linscale_jax.run import command
from linscale_jax.train import divergence
from linscale_jax.run import identity
from linscale_jax.run import integrity
from linscale_jax.train import loop as trainer
from linscale_jax.run import lock as workdir_lock
from linscale_jax.train import metrics as metrics_lib

STEPS = 6  # shares compilations with test_train_resume.py


def config(steps=STEPS, **train):
    c = tiny_config(steps=steps, **train)
    c.checkpoint.update(every_steps=3, async_save=True)
    return c


def logged_losses(workdir, steps=STEPS):
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    return [r["loss"] for r in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 6-step run with checkpoints 3 and 6: (workdir, losses)."""
    workdir = tmp_path_factory.mktemp("reference")
    trainer.train(config(), workdir)
    return workdir, logged_losses(workdir)


@pytest.fixture
def run(reference, tmp_path):
    """A private copy of the reference run."""
    workdir = tmp_path / "run"
    shutil.copytree(reference[0], workdir)
    return workdir


# ------------------------------------------------------------------ 1. a run's identity


@pytest.mark.parametrize("change", [
    dict(model=dict(d_model=96)),          # another model: refused, no checkpoint quarantined
    dict(train=dict(batch_size=8)),        # token/FLOP accounting would run backwards
    dict(optim=dict(lr=3e-2)),             # another schedule: refused, not silently accepted
])
def test_config_change_on_resume_is_refused_and_touches_nothing(run, change):
    before = snapshot(run)
    c = config()
    for section, fields in change.items():
        c[section].update(fields)
    with pytest.raises(identity.RunIdentityError) as e:
        trainer.train(c, run)
    field = next(f"{s}.{k}" for s, f in change.items() for k in f)
    assert field in str(e.value) and "\n" not in str(e.value)
    assert snapshot(run) == before and not (run / "checkpoints_corrupt").exists()


def test_allowed_changes_resume_and_are_not_refused(run, reference):
    c = config()
    c.train.update(log_every=2, eval_every=0)
    c.checkpoint.update(every_steps=2, keep=0, async_save=False)
    c.mesh.update(data=1)
    c.train.steps = STEPS  # same length: nothing to train, but the resume must be accepted
    out = trainer.train(c, run)
    assert out["step"] == STEPS


def test_allow_config_change_is_recorded(run):
    shutil.rmtree(run / "checkpoints" / "6")
    c = config()
    c.optim.lr = 1e-3  # (the divergence test's compilation)
    trainer.train(c, run, allow_config_change=True)
    meta = ckpt.load_metadata(run, STEPS)
    assert meta["config_changes"] == [dict(at_step=3, fields={"optim.lr": [1e-2, 1e-3]})]
    assert meta["fingerprint"] == identity.fingerprint(c)["sha256"]
    assert ckpt.load_metadata(run, 3)["fingerprint"] == identity.fingerprint(config())["sha256"]


def test_model_change_refused_by_cli_in_one_line(run):
    """A changed model through the CLI: rc 1, one stderr line, no TF/CUDA noise, workdir intact."""
    before = snapshot(run)
    c = config()
    flags = [a for a in cli_overrides(c) if not a.startswith("--config.model.n_layers")]
    cmd = [sys.executable, "-m", "linscale_jax.train", "--config=configs/tiny.py:llama-d64",
           f"--workdir={run}", "--config.model.n_layers=2", *flags]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: ") and "model.n_layers" in lines[0], \
        p.stderr
    log = lines[0].rsplit("[traceback: ", 1)[1].rstrip("]")  # a refusal's log: outside the workdir
    assert not log.startswith(str(run)) and "Traceback" in open(log).read()
    assert snapshot(run) == before


# ------------------------------------------------------------------ 2. one writer per workdir


def _holder(workdir):
    code = ("import sys, time; from linscale_jax.run import lock as workdir_lock\n"
            "with workdir_lock.hold(sys.argv[1]):\n    print('held', flush=True); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code, str(workdir)], cwd=ROOT,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_second_trainer_is_refused_naming_the_holder(run, reference):
    holder = _holder(run)
    try:
        before = snapshot(run)
        with pytest.raises(workdir_lock.WorkdirLockedError) as e:
            trainer.train(config(steps=STEPS + 1), run)
        assert f"pid {holder.pid}" in str(e.value)
        assert snapshot(run) == before
        workdir_lock.check_free(run / "nonexistent")  # readers are never blocked
    finally:
        holder.kill()
        holder.wait()
    # the holder died by SIGKILL: its lock is stale, the next trainer takes over and resumes
    out = trainer.train(config(), run)
    assert out["step"] == STEPS and not (run / workdir_lock.LOCK_NAME).exists()


def test_stale_lock_file_of_a_dead_pid_is_taken_over(run, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / workdir_lock.LOCK_NAME).write_text(json.dumps(
        dict(host=os.uname().nodename, pid=dead.pid, started="x", heartbeat=time.time())))
    trainer.train(config(), run)
    assert f"stale lock of pid {dead.pid}" in capsys.readouterr().out



_ENDING_HOLDER = r"""
import fcntl, json, os, socket, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, json.dumps(dict(host=socket.gethostname(), pid=os.getpid(), started="x",
                             heartbeat=time.time())).encode())
if os.fork() == 0:  # the child keeps the flock (one open file) for a moment after the pid is gone
    time.sleep(float(sys.argv[2]))
os._exit(0)
"""


def test_a_dead_holders_flock_that_lingers_is_waited_for_then_taken_over(tmp_path, monkeypatch, capsys):
    """The kernel drops a killed trainer's flock when its last thread has exited, a moment after its
    pid is gone (a zombie leader): check_free and hold wait RELEASE_WAIT_S for that, no longer."""
    subprocess.run([sys.executable, "-c", _ENDING_HOLDER, str(tmp_path / workdir_lock.LOCK_NAME), "2"],
                   check=True)
    dead = workdir_lock.read_holder(tmp_path)["pid"]
    monkeypatch.setattr(workdir_lock, "RELEASE_WAIT_S", 0.2)
    with pytest.raises(workdir_lock.WorkdirLockedError, match=f"pid {dead} "):
        workdir_lock.check_free(tmp_path)  # still held after 0.2 s
    monkeypatch.setattr(workdir_lock, "RELEASE_WAIT_S", 30.0)
    workdir_lock.check_free(tmp_path)
    with workdir_lock.hold(tmp_path) as me:
        assert me["pid"] == os.getpid()
    assert f"stale lock of pid {dead}" in capsys.readouterr().out
    (tmp_path / workdir_lock.LOCK_NAME).write_text("[1, 2]")  # valid JSON, not a holder: no holder
    assert workdir_lock.read_holder(tmp_path) is None
    workdir_lock.check_free(tmp_path)


# ------------------------------------------------------------------ 3. verified checkpoints


def _files(step_dir, item):
    return sorted(p for p in (step_dir / item).rglob("*") if p.is_file() and p.stat().st_size > 16)


def _flip(path, offset=8):
    b = bytearray(path.read_bytes())
    b[offset] ^= 0xFF
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("item", ["params", "opt_state", "metadata", "broken_json", "missing",
                                  "empty"])
def test_damaged_latest_checkpoint_is_moved_aside_and_run_continues_exactly(
        run, reference, item, capsys):
    step6 = run / "checkpoints" / "6"
    if item == "missing":
        _files(step6, "params")[0].unlink()
    elif item == "empty":  # must not block reruns ("Checkpoint for step 6 already exists")
        shutil.rmtree(step6)
        step6.mkdir()
    elif item == "broken_json":  # must not block reruns at step 6, like an empty dir
        (step6 / "metadata" / "metadata").write_text('{"step": 6, "tok')
    elif item == "metadata":  # a flipped digit: still valid JSON, so only the checksum sees it
        f = step6 / "metadata" / "metadata"
        f.write_text(f.read_text().replace('"step": 6', '"step": 7'))
    else:  # data chunk bytes flipped: must not restore without complaint
        for f in _files(step6, item):
            _flip(f, offset=len(f.read_bytes()) // 2)
    # metrics.jsonl as after a crash at step 6: the rerun must redo steps 4..6
    trainer.train(config(), run)
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "checkpoint step 6" in warnings[0], out
    assert "(step 3" in out
    assert [p.name.split("-")[0] for p in (run / "checkpoints_corrupt").iterdir()] == ["6"]
    assert logged_losses(run) == reference[1]
    assert ckpt.list_steps(run) == [3, 6]


def test_eval_loading_refuses_a_corrupt_checkpoint(run):
    for f in _files(run / "checkpoints" / "6", "params"):
        _flip(f, offset=len(f.read_bytes()) // 2)
    from linscale_jax.run.checksums import CheckpointCorruptError

    with pytest.raises(CheckpointCorruptError, match="checksum mismatch"):
        ckpt.load_model(run, 6)
    assert (run / "checkpoints" / "6").is_dir()  # readers never move anything


# ------------------------------------------------------------------ full disk


def test_full_disk_fails_in_one_line_and_resume_is_exact(run, reference, monkeypatch, capsys):
    shutil.rmtree(run / "checkpoints" / "6")  # as if the run had crashed after step 3's save
    save = ocp.CheckpointManager.save

    def failing_save(self, step, *a, **k):
        if step == 6:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.directory))
        return save(self, step, *a, **k)

    monkeypatch.setattr(ocp.CheckpointManager, "save", failing_save)
    rc = command.run(lambda: trainer.train(config(), run), workdir=run, command="train")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "no space left on device" in err[0]
    log = err[0].split("[traceback: ")[1].rstrip("]")
    assert log.startswith(str(run / "logs")) and "ENOSPC" not in err[0]
    assert "No space left on device" in open(log).read()
    assert ckpt.list_steps(run) == [3] and not (run / workdir_lock.LOCK_NAME).exists()
    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    trainer.train(config(), run)
    assert logged_losses(run) == reference[1]


# ------------------------------------------------------------------ divergence


def test_divergence_names_a_really_good_checkpoint_and_the_advice_works(reference, tmp_path):
    workdir = tmp_path / "div"
    shutil.copytree(reference[0], workdir)
    shutil.rmtree(workdir / "checkpoints" / "6")  # healthy steps 1..3
    c6 = config()
    c6.checkpoint.update(every_steps=1, async_save=True)
    c6.optim.lr = 1e3
    with pytest.raises(divergence.DivergenceError) as e:
        trainer.train(c6, workdir, allow_config_change=True)
    err = e.value
    # checkpoint 4 was written (asynchronously) with the bad update: finite but diverged
    assert 4 in ckpt.list_steps(workdir) and err.last_good == 3, str(err)
    assert "--resume_step=3" in str(err) and "already diverged" in str(err)
    assert err.lr <= 1e-3
    cmd = divergence.resume_command(["train.py", "--workdir=w", "--config.optim.lr=1000"],
                                    err.last_good, err.lr)
    assert "--resume_step=3" in cmd and "--config.optim.lr=0.001" in cmd \
        and "--config.optim.lr=1000" not in cmd
    # a copy follows the advice with the run's own lr: the continuation is bit-identical
    exact = tmp_path / "exact"
    shutil.copytree(workdir, exact)
    trainer.train(config(), exact, resume_step=3)
    assert logged_losses(exact) == reference[1]
    assert sorted(p.name for p in next((exact / "checkpoints_discarded").iterdir()).iterdir()) \
        == [str(s) for s in range(4, ckpt.list_steps(workdir)[-1] + 1)]  # nothing deleted
    # following the printed advice (lower lr) does not hit the same wall
    c6.optim.lr = err.lr
    out = trainer.train(c6, workdir, resume_step=3, allow_config_change=True)
    assert out["step"] == STEPS and all(abs(v) < 10 for v in out["losses"].values())


_DIVERGENCE_CLI = """
import sys, types
from linscale_jax.run import command
from linscale_jax.train import divergence
from linscale_jax.train import loop as trainer
from linscale_jax.train import cli as train
def boom(*a, **k):
    raise divergence.DivergenceError("training diverged at step 5: loss is nan", 5, 3, 1e-3)
for name in ("_WORKDIR", "_INIT_FROM", "_RESUME_STEP", "_ALLOW_CHANGE"):
    setattr(train, name, types.SimpleNamespace(value=None))
train._CONFIG = types.SimpleNamespace(value=__import__("runpy").run_path("configs/tiny.py")["get_config"]())
train._INITIALIZE = lambda: None  # no launch flags parsed here
trainer.train = boom
sys.argv = ["linscale_jax/train/cli.py", "--workdir=" + sys.argv[1]]
sys.exit(command.run(train._train, workdir=sys.argv[1].split("=", 1)[1], command="train"))
"""


def test_divergence_cli_prints_one_line_with_the_command(tmp_path):
    # A fresh process: the train CLI's absl flags must not meet another CLI module's in one process.
    p = subprocess.run([sys.executable, "-c", _DIVERGENCE_CLI, str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1, p.stderr
    assert "python -m linscale_jax.train" in err[0] and "--resume_step=3" in err[0]


# ------------------------------------------------------------------ smaller items


def test_ctrl_c_saves_like_sigterm_and_resume_is_exact(reference, tmp_path, monkeypatch, capsys):
    workdir = tmp_path / "sigint"
    write = metrics_lib.MetricsLogger.write

    def write_then_int(self, row):
        write(self, row)
        if row["step"] == 2:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(metrics_lib.MetricsLogger, "write", write_then_int)
    first = trainer.train(config(), workdir)
    monkeypatch.setattr(metrics_lib.MetricsLogger, "write", write)
    assert first["stopped"] == "SIGINT" and ckpt.list_steps(workdir) == [2]
    trainer.train(config(), workdir)
    assert logged_losses(workdir) == reference[1]
    # compilation is announced with its time; the first row after the resume has a real rate
    # (taken over the steps since the resume, not over zero steps)
    assert capsys.readouterr().out.count("Compiled the train step in") == 2
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert rows[2]["step"] == 3 and rows[2]["tokens_per_sec"] > 0


def test_init_from_on_a_run_with_checkpoints_is_refused(run, reference):
    before = snapshot(run)
    with pytest.raises(integrity.RunRefusedError, match="re-run without --init_from"):
        trainer.train(config(), run, init_from=str(reference[0]))
    assert snapshot(run) == before


def test_convert_refuses_a_non_empty_out(run, capsys):
    from linscale_jax.interop import convert

    before = snapshot(run)
    assert convert.main(["--from=hf-llama", "--src=/nonexistent", f"--workdir={run}"]) == 1
    assert "not empty" in capsys.readouterr().err and snapshot(run) == before


def test_failed_start_leaves_no_workdir_and_one_line(tmp_path, capsys):
    workdir = tmp_path / "new"
    c = config()
    c.train.seq_len = 10_000  # > model.max_seq_len
    rc = command.run(lambda: trainer.train(c, workdir), workdir=workdir, command="train")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "max_seq_len" in err[0]
    assert not workdir.exists()


def test_bad_flag_is_one_line(tmp_path):
    """A misspelt config override is a one-line error, not a 60-line ml_collections traceback."""
    cmd = [sys.executable, "-m", "linscale_jax.train", "--config=configs/tiny.py",
           f"--workdir={tmp_path / 'w'}", "--config.train.stepz=3"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and 'did you mean steps?' in lines[0], p.stderr
    assert not (tmp_path / "w").exists()
