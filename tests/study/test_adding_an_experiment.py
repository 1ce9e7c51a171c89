"""docs/study.md's "Adding an experiment", followed as written: in a copy of the package, its Kind
member, its three code blocks (the steps, the registration, the preset) put where it says, then
`python -m linscale_jax.study --config=context` lists the runs (--dry_run) and runs the new kind to
its report, shrunk to two lengths and 4 steps a run. About a minute on 2 idle cores (two fresh
interpreters, two tiny trainer runs, the records of one more sequence length prepared)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def walkthrough() -> tuple[str, list[str]]:
    """(the Kind member's line, the section's python code blocks in order)."""
    text = (ROOT / "docs" / "study.md").read_text()
    section = text.split("## Adding an experiment", 1)[1].split("\n## ", 1)[0]
    member = re.search(r"`(CONTEXT = \"context\"[^`]*)`", section).group(1)
    blocks = [re.sub(r"^ {3}", "", b, flags=re.M) for b in re.findall(r"```python\n(.*?)```", section, re.S)]
    return member, blocks


@pytest.mark.slow  # two fresh interpreters and two tiny trainer runs: about a minute on 2 cores
def test_the_documented_walkthrough_adds_a_kind_that_runs(tmp_path):
    member, (steps, register, preset) = walkthrough()
    for pkg in ("linscale_jax", "kernels_pallas"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    exp = tmp_path / "linscale_jax" / "study" / "experiments.py"
    source = exp.read_text()
    anchor = '    CALIBRATE = "calibrate"'
    assert anchor in source
    exp.write_text(source.replace(anchor, f"{anchor}\n    {member}", 1))  # step 1: the kind
    kind = tmp_path / "linscale_jax" / "study" / "context"
    kind.mkdir()
    (kind / "steps.py").write_text(steps)  # step 2: its four steps
    (kind / "__init__.py").write_text(register)  # step 3: registered
    (tmp_path / "linscale_jax" / "configs" / "study" / "context.py").write_text(preset)  # step 4: a preset
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(tmp_path),
                                                                          "JAX_PLATFORMS": "cpu"}
    wd = tmp_path / "study"

    def run(*flags):
        out = subprocess.run([sys.executable, "-m", "linscale_jax.study", "--config=context", f"--workdir={wd}",
                              *flags], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    listing = run("--dry_run")
    assert listing.startswith("3 run(s):") and "llama-d32-t512" in listing
    # shrunk: two lengths (each its own prepared records), 4 steps a run
    run("--config.size=d16l2", "--config.seq_lens=128,256", "--config.tokens=2048", "--config.workers=1",
        "--config.eval.val_batches=1")
    rows = (wd / "report.md").read_text().splitlines()
    assert rows[:2] == ["| seq_len | loss |", "|---|---|"] and [r.split(" | ")[0] for r in rows[2:]] == [
        "| 128", "| 256"]
    assert all(0 < float(r.split(" | ")[1].strip(" |")) < 10 for r in rows[2:])
