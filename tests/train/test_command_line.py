"""The train command's command line (linscale_jax.run.command_line), through the real entry point:
--help exits 0 with the purpose, the flags and where the config fields are; --config_help lists a
config file's fields with their values and notes (no --workdir needed); a config file that does not
exist or does not load, and an override naming no field, are one line each (exit status 2).
Five interpreters, about 15 s of CPU."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def train(*args, cwd=REPO):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "linscale_jax.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def one_error_line(out):
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), out.stderr[-2000:]
    return lines[0]


def test_help_exits_0_with_purpose_flags_and_config_fields():
    out = train("--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("Train a model: python -m linscale_jax.train")
    for text in ("--workdir:", "--init_from:", "--coordinator_address:", "--config_help", "Config fields:",
                 "linscale_jax/config.py", str(REPO / "linscale_jax" / "configs")):
        assert text in out.stdout, text


def test_config_help_lists_fields_values_and_notes():
    out = train("--config=configs/tiny.py:hgrn2", "--config.train.steps=7", "--config_help")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("Fields of --config=configs/tiny.py:hgrn2")
    assert any(line.split("#")[0].strip() == "train.steps = 7" for line in lines)
    assert any(line.startswith("  model.arch = 'hgrn2'") and "registered architecture" in line for line in lines)
    assert any(line.startswith("  train.batch_size = 16") and "# global batch, sequences" in line for line in lines)


def test_missing_and_unloadable_config_files_are_one_line(tmp_path):
    line = one_error_line(train("--config=configs/nonexist.py", f"--workdir={tmp_path / 'run'}"))
    assert line.startswith(f"ERROR: config file configs/nonexist.py does not exist (relative to {REPO}); "
                           "pass a packaged config by name (ladder, paper, tiny: --config=tiny[:ARG]) or the "
                           "path of a .py file"), line
    assert str(REPO / "linscale_jax" / "configs") in line
    line = one_error_line(train("--config=tinyy", f"--workdir={tmp_path / 'run'}"))  # a packaged name
    assert line.startswith("ERROR: bad command line: no packaged config 'tinyy'") and "tiny" in line, line
    broken = tmp_path / "broken.py"
    broken.write_text("from linscale_jax.config import base_config\n\ndef get_config(:\n")
    line = one_error_line(train(f"--config={broken}", f"--workdir={tmp_path / 'run'}"))
    assert line.startswith(f"ERROR: config file {broken} did not load (line 3): SyntaxError: "), line
    line = one_error_line(train("--config=configs/tiny.py:mamba", "--config.train.steps=3",
                                f"--workdir={tmp_path / 'run'}"))
    assert line.startswith("ERROR: config file configs/tiny.py:mamba did not load (line 20): ValueError: config "
                           "name 'mamba-d64' must be"), line
    assert not (tmp_path / "run").exists()


def test_an_override_naming_no_field_is_one_line(tmp_path):
    line = one_error_line(train("--config=configs/tiny.py", "--config.train.stepz=3", f"--workdir={tmp_path}"))
    assert line == ("ERROR: bad command line: --config.train.stepz names no config field (did you mean steps?); "
                    "`--config=configs/tiny.py --config_help` lists the fields."), line


def test_the_other_absl_commands_share_help_and_one_line_errors():
    """describe and the study: --help exits 0 with the command's purpose; a bare packaged name works
    for describe's --config, and an unknown flag is one line (exit status 2)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    for module, purpose in (("linscale_jax.models.describe", "Print a model's shape"),
                            ("linscale_jax.study", "python -m linscale_jax.study")):
        out = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0 and purpose in out.stdout, (module, out.returncode, out.stderr[-2000:])
    out = subprocess.run([sys.executable, "-m", "linscale_jax.models.describe", "--config=tiny:tnl-d32"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.splitlines()[2].split()[:2] == ["tnl", "d32"], out.stderr[-2000:]
    line = one_error_line(subprocess.run([sys.executable, "-m", "linscale_jax.models.describe", "--bogus"], cwd=REPO,
                                         env=env, capture_output=True, text=True, timeout=300))
    assert line.startswith("ERROR: bad command line: Unknown command line flag bogus"), line
