"""Nothing lost, with real processes: a workdir is removed only by the trainer that created it,
while it holds the lock, and any number of signals is one stop.

One live trainer B (the module fixture) meets, in order:
  - the creation race: trainer A creates the new workdir, then pauses before locking it
    (LINSCALE_TEST_PAUSE_AFTER_MKDIR, read by linscale_jax.run.lock) until B has taken the lock;
    A is refused in one line and B's workdir, lock and run survive;
  - the alias: a trainer on DIR/x/../real (DIR/x does not exist) while DIR/real trains is refused in
    one line; nothing is created or removed; eval on the alias fails and removes nothing;
  - SIGTERM, SIGTERM, SIGINT 0.2 s apart: one stop line, exit status 0, no traceback, the
    checkpoint of the step it stopped at, one metrics row per step;
then eval of B's checkpoints gets the same three signals (one line, exit 0, the rows so far kept),
and --resume_step=-5 and a step without a checkpoint are refused in one line, touching nothing.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers.train import ROOT, cli_overrides, snapshot, tiny_config

from linscale_jax.run import checkpoint as ckpt
from linscale_jax.run import lock as workdir_lock

SIGNALS = (signal.SIGTERM, signal.SIGTERM, signal.SIGINT)
TIMEOUT = 240  # seconds for any one wait (a loaded 2-core machine)


def train_cmd(workdir, *extra):
    c = tiny_config(steps=100_000)
    c.checkpoint.update(every_steps=2)
    return [sys.executable, "-m", "linscale_jax.train", "--config=configs/tiny.py:llama-d64",
            f"--workdir={workdir}", *cli_overrides(c), *extra]


def start(cmd, **env):
    return subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, **env), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(what, ok, procs=()):
    deadline = time.time() + TIMEOUT
    while not ok():
        dead = [p for p in procs if p.poll() is not None]
        assert not dead and time.time() < deadline, \
            f"waiting for {what}: " + "\n".join(p.communicate()[1][-3000:] for p in dead)
        time.sleep(0.1)


def signalled(p, sigs=SIGNALS, gap=0.2):
    """Send `sigs` `gap` seconds apart; (rc, stdout, stderr, seconds from the first signal)."""
    t0 = time.time()
    for sig in sigs:
        p.send_signal(sig)
        time.sleep(gap)
    out, err = p.communicate(timeout=TIMEOUT)
    return p.returncode, out, err, time.time() - t0


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """B trains DIR/real while A (the race) and C (the alias) are refused, then gets 3 signals."""
    root = tmp_path_factory.mktemp("nothing_lost")
    real = root / "real"
    out = dict(real=real, root=root)
    a = start(train_cmd(real), LINSCALE_TEST_PAUSE_AFTER_MKDIR=str(real / "train.lock"))
    b = None
    try:
        wait_for("A to create the workdir", real.is_dir, [a])
        b = start(train_cmd(real))
        out["a"] = (a.wait(timeout=TIMEOUT), *a.communicate())
        out["b_pid"] = b.pid
        out["lock_after_a"] = json.loads((real / "train.lock").read_text())
        c = start(train_cmd(root / "x" / ".." / "real"))
        out["c"] = (c.wait(timeout=TIMEOUT), *c.communicate())
        out["x_exists"] = (root / "x").exists()
        from linscale_jax.eval.__main__ import main as eval_main  # a reader on the alias, failing

        out["eval_alias_rc"] = eval_main([f"--workdir={root / 'x' / '..' / 'real'}", "--steps=999"])
        wait_for("8 checkpoints", lambda: len(ckpt.list_steps(real)) >= 8, [b])
        out["b"] = signalled(b)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    return out


def test_the_trainer_that_lost_the_creation_race_removes_nothing(live):
    rc, _, err = live["a"]
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("ERROR: "), err
    assert f"is being trained by pid {live['b_pid']}" in lines[0]
    assert live["lock_after_a"]["pid"] == live["b_pid"]  # B's lock survived A's refusal


def test_an_alias_of_a_live_workdir_is_refused_and_touches_nothing(live):
    rc, _, err = live["c"]
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1, err
    assert f"{live['real']} is being trained by pid {live['b_pid']}" in lines[0]  # resolved path
    assert not live["x_exists"]
    assert live["eval_alias_rc"] == 1


def test_three_signals_to_the_trainer_are_one_stop(live):
    rc, out, err, _ = live["b"]
    assert rc == 0, err
    assert "Traceback" not in out + err and "ERROR" not in out + err, err
    stops = [x for x in out.splitlines() if "saved checkpoint at step" in x]
    assert len(stops) == 1 and out.strip().splitlines()[-1] == stops[0], out[-2000:]
    step = int(stops[0].split("at step ")[1].split(";")[0])
    assert stops[0].startswith("SIGTERM: ") and step in ckpt.list_steps(live["real"])
    rows = [json.loads(x)["step"] for x in (live["real"] / "metrics.jsonl").read_text().splitlines()]
    assert rows == list(range(1, step + 1))  # one writer: every step once
    assert not (live["real"] / "train.lock").exists()


def test_three_signals_to_eval_are_one_stop_and_keep_the_rows(live):
    real = live["real"]
    steps = ckpt.list_steps(real)
    results = real / "eval" / "results.jsonl"
    p = start([sys.executable, "-m", "linscale_jax.eval", f"--workdir={real}", "--val_batches=50"])
    try:
        wait_for("eval's first row", lambda: results.exists() and results.read_text().strip(), [p])
        rc, out, err, _ = signalled(p)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 0 and "Traceback" not in out + err and "ERROR" not in out + err, err
    assert out.strip().splitlines()[-1].startswith("SIGTERM: eval stopped; the rows written so far "
                                                   f"are kept in {results}"), out
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    assert 1 <= len(rows) < len(steps) and [r["step"] for r in rows] == steps[:len(rows)]


@pytest.mark.parametrize("value", ["-5", "3"])  # negative; no checkpoint at that step (every 2)
def test_a_resume_step_without_a_checkpoint_is_refused_in_one_line(live, value):
    real = live["real"]
    before = snapshot(real)
    p = subprocess.run(train_cmd(real, f"--resume_step={value}"), cwd=ROOT, capture_output=True,
                       text=True, timeout=TIMEOUT)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and f"--resume_step={value}: " in lines[0], p.stderr
    assert "usable steps: [" in lines[0] and snapshot(real) == before


def test_claim_removes_only_the_directory_it_made_and_only_without_a_checkpoint(tmp_path):
    def fail_in(workdir, inside=lambda: None):
        with pytest.raises(RuntimeError):
            with workdir_lock.claim(workdir):
                inside()
                raise RuntimeError("a failed start")

    made = tmp_path / "made"
    fail_in(made, lambda: (made / "metrics.jsonl").write_text("{}"))
    assert not made.exists() and sorted(p.name for p in tmp_path.iterdir()) == []
    existed = tmp_path / "existed"
    existed.mkdir()
    fail_in(existed)
    assert existed.is_dir() and not any(existed.iterdir())  # its lock file is gone, the dir kept
    saved = tmp_path / "saved"
    fail_in(saved, lambda: (saved / "checkpoints" / "1").mkdir(parents=True))
    assert (saved / "checkpoints" / "1").is_dir()
    swapped = tmp_path / "swapped"  # another directory at the path by now: not the one it made
    fail_in(swapped, lambda: (swapped.rename(tmp_path / "moved"), swapped.mkdir()))
    assert swapped.is_dir() and (tmp_path / "moved").is_dir()


def test_one_stop_however_many_signals_wherever_they_land():
    from linscale_jax.run import signals

    def kill(*sigs):
        for sig in sigs:
            os.kill(os.getpid(), sig)
            time.sleep(0.01)  # the handler runs between bytecodes

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(signals.Interrupted, match="SIGTERM"):  # the body: cut at once, once
        with signals.running():
            kill(*SIGNALS)
            pytest.fail("not interrupted")
    with pytest.raises(signals.Interrupted, match="SIGINT"):
        with signals.running():
            with signals.postponed():  # a region not to cut: the stop comes when it ends
                kill(signal.SIGINT, *SIGNALS)
                held = True
    assert held
    calls = []
    with signals.running():
        with signals.deferred(on_stop=calls.append) as stop:  # its owner handles the stop
            kill(*SIGNALS)
            assert stop.name == "SIGTERM" and calls == [signal.SIGTERM]
        kill(signal.SIGINT)  # handled: later signals change nothing
        with signals.postponed():
            kill(signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) is before and signals.received() is None
