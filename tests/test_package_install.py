"""A non-editable install carries what its commands read, and they work from any folder.

The package is built and installed from a copy of its sources (`pip install --no-deps
--no-build-isolation --target SITE SRC`: a wheel, as `pip install .` makes), then the README's
commands run with only SITE on the path, from a folder that holds packages of its own named eval,
fit and study (each fails when imported), with bare preset names:

    python -m linscale_jax.study --config=cpu --workdir=DIR --dry_run
    python -m linscale_jax.study --config=recall --workdir=DIR --dry_run      # the packaged rates
    python -m linscale_jax.train --config=tiny --workdir=DIR --config.train.steps=2
    python -m linscale_jax.eval --workdir=DIR --tasks=val_loss --val_batches=1
    python -m linscale_jax.models.describe --paper

About 2 minutes on 2 idle cores (the build, five fresh interpreters, a 2-step run)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "linscale_jax", "kernels_pallas")
# what the commands read from the package (importlib.resources), beside the code
DATA = ("linscale_jax/configs/tiny.py", "linscale_jax/configs/ladder.py", "linscale_jax/configs/paper.py",
        "linscale_jax/configs/study/cpu.py", "linscale_jax/configs/study/recall.py",
        "linscale_jax/configs/study/recall_rates.json", "linscale_jax/train/tuned_rule.json",
        "linscale_jax/train/grid_rule.json",
        "linscale_jax/eval/tasks/linscale_commonsense.yaml", "linscale_jax/fit/data/chinchilla_fig4_epoch.csv",
        "linscale_jax/fit/data/chinchilla_fig4_epoch.source.md")


@pytest.mark.slow  # a build and five fresh interpreters: about 2 minutes on 2 cores
def test_an_installed_package_runs_its_commands_from_a_folder_with_its_own_eval_fit_study(tmp_path):
    src, site, here = tmp_path / "src", tmp_path / "site", tmp_path / "elsewhere"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, src / name)
    build = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--target", str(site), str(src)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    missing = [f for f in DATA if not (site / f).is_file()]
    assert not missing, f"not installed: {missing}"
    for pkg in ("eval", "fit", "study"):  # the user's own folders of those names
        (here / pkg).mkdir(parents=True)
        (here / pkg / "__init__.py").write_text(f"raise ImportError('{pkg}: the folder of the user')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site),
                                                                          "JAX_PLATFORMS": "cpu"}

    def run(*args):
        out = subprocess.run([sys.executable, "-m", *args], cwd=here, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, (args, out.stderr[-3000:])
        return out.stdout

    where = subprocess.run([sys.executable, "-c", "import linscale_jax; print(linscale_jax.__file__)"], cwd=here,
                           env=env, capture_output=True, text=True, timeout=120).stdout
    assert where.startswith(str(site)), where  # the installed copy, not the clone
    text = run("linscale_jax.study", "--config=cpu", f"--workdir={tmp_path / 'study'}", "--dry_run")
    assert text.startswith("24 run(s):") and "python -m linscale_jax.train --config=ladder:llama-d32l2" in text
    text = run("linscale_jax.study", "--config=recall", f"--workdir={tmp_path / 'recall'}", "--dry_run")
    assert text.startswith("38 run(s):")
    wd = tmp_path / "run"
    text = run("linscale_jax.train", "--config=tiny", f"--workdir={wd}", "--config.train.steps=2",
               "--config.train.eval_every=0", "--config.checkpoint.log_spaced=0")
    assert "Done at step 2" in text
    run("linscale_jax.eval", f"--workdir={wd}", "--tasks=val_loss", "--val_batches=1")
    rows = [json.loads(line) for line in (wd / "eval" / "results.jsonl").read_text().splitlines()]
    assert [(r["task"], r["step"]) for r in rows] == [("val_loss", 2)], rows
    assert "cosformer2" in run("linscale_jax.models.describe", "--paper")
