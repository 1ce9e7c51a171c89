"""`python -m linscale_jax.study` with real processes: its runs' workdirs survive a refused trainer, and any
number of signals is one stop.

The study trains two runs in two worker processes (configs/study/quick.py, llama and tnl d32, a
long token budget); once both compiled:
  - a trainer on an alias of one run's workdir (runs/x/../<run>) is refused in one line and
    removes nothing;
  - SIGTERM, SIGTERM to the study and a SIGINT to its process group (Ctrl-C in a terminal, which
    reaches the workers too), 0.2 s apart: one stop line, exit status 0, no traceback from the
    study or its workers, a checkpoint in each run.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from linscale_jax.run import checkpoint as ckpt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 300  # seconds for any one wait (a loaded 2-core machine)
RUNS = ("llama-d32", "tnl-d32")


@pytest.mark.slow  # a real study with two worker processes: over 30 s on 2 CPU cores
def test_refused_alias_removes_nothing_and_three_signals_are_one_stop(tmp_path):
    wd = tmp_path / "study"
    p = subprocess.Popen(
        [sys.executable, "-m", "linscale_jax.study", "--config=configs/study/quick.py", f"--workdir={wd}",
         "--config.archs=llama,tnl", "--config.sizes=d32", "--config.replicates.seeds=0",
         "--config.tokens=1e8"], cwd=ROOT, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True)
    try:
        logs = [wd / "runs" / r / "study.log" for r in RUNS]
        deadline = time.time() + TIMEOUT
        while not all(f.exists() and "Compiled the train step" in f.read_text() for f in logs):
            assert p.poll() is None and time.time() < deadline, p.communicate()[1][-3000:]
            time.sleep(0.2)
        run = wd / "runs" / RUNS[0]
        alias = subprocess.run(
            [sys.executable, "-m", "linscale_jax.train", "--config=configs/tiny.py:llama-d32",
             f"--workdir={wd / 'runs' / 'x' / '..' / RUNS[0]}"], cwd=ROOT, text=True,
            capture_output=True, timeout=TIMEOUT)
        lines = alias.stderr.strip().splitlines()
        assert alias.returncode == 1 and len(lines) == 1, alias.stderr
        assert f"{run} is being trained by pid" in lines[0]
        assert not (wd / "runs" / "x").exists() and (run / "train.lock").exists()
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == 0, err
    assert "Traceback" not in out + err and "ERROR" not in out + err, out[-2000:] + err[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("[study] stopped by SIGTERM: ") and "re-run the same command" in last
    assert sum("stopped" in x for x in out.splitlines()) == 1, out
    for r in RUNS:
        assert ckpt.list_steps(wd / "runs" / r), r  # each worker's trainer saved where it stopped
    assert time.time() - t0 < TIMEOUT
