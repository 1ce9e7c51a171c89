"""A missing extra is one line naming the extra and its pip line: each extra of pyproject.toml
([eval], [interop], [cluster], [track], [notebook]) is blocked in a fresh interpreter (a meta-path
finder that answers "No module named ..." for its modules, as an environment without it does) and
the command that needs it runs there: it prints exactly one line,
`ERROR: <module> is not installed (...): it comes with the [<extra>] extra, ...; install it in the
clone with `pip install ".[<extra>]" -c requirements.txt``, and exits 1, with no traceback on the
console. The table in linscale_jax/run/extras.py is checked against pyproject.toml.
About 60 s of CPU in all (five interpreters importing jax; eval and track load a tiny checkpoint).
"""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from linscale_jax.run import extras

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import importlib.abc, json, runpy, sys
blocked, module, argv = json.loads(sys.argv[1])

class Missing(importlib.abc.MetaPathFinder):  # the extra is not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Missing())
sys.argv = [module] + argv
if module.endswith(".py"):
    runpy.run_path(module, run_name="__main__")
else:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def test_the_table_is_pyprojects_extras():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras.EXTRAS) == set(declared) - {"tpu", "cuda12", "test"}
    for extra, (modules, _) in extras.EXTRAS.items():  # these distributions are named like their modules
        names = {spec.split(">")[0].split("<")[0].split("=")[0].strip().replace("-", "_") for spec in declared[extra]}
        assert set(modules) == names, extra
    assert extras.extra_of("lm_eval.api.model") == "eval" and extras.extra_of("numpy") is None


def run_blocked(extra, module, argv, cwd=REPO):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"JAX_PLATFORMS": "cpu",
                                                                        "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps([extras.EXTRAS[extra][0], module, argv])],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in out.stderr.splitlines() if line.startswith("ERROR:")]
    assert out.returncode == 1, (out.returncode, out.stderr[-3000:])
    assert len(errors) == 1 and "Traceback" not in out.stderr + out.stdout, out.stderr[-3000:]
    assert f'pip install ".[{extra}]" -c requirements.txt' in errors[0], errors[0]
    assert f"it comes with the [{extra}] extra" in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A workdir holding one checkpoint of a tiny llama (byte vocabulary)."""
    from flax import nnx

    from linscale_jax.config import base_config
    from linscale_jax.models import ModelConfig, build_model
    from linscale_jax.run import checkpoint as ckpt

    config = base_config()
    config.model.update(dict(arch="llama", n_layers=1, d_model=32, n_heads=2, ffn_dim=32, vocab_size=259))
    run = tmp_path_factory.mktemp("extras") / "run"
    ckpt.save_model(str(run), build_model(ModelConfig.from_config(config.model), rngs=nnx.Rngs(0)), config)
    return run


def test_eval_without_the_eval_extra(tiny_run):
    line = run_blocked("eval", "linscale_jax.eval", [f"--workdir={tiny_run}", "--tasks=commonsense",
                                                     f"--out={tiny_run.parent / 'eval'}"])
    assert line.startswith("ERROR: lm_eval is not installed"), line


def test_convert_without_the_interop_extra(tmp_path):
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(dict(num_hidden_layers=1, hidden_size=8, num_attention_heads=2,
                                                     intermediate_size=8, vocab_size=5)))
    (src / "model.safetensors").write_bytes(b"")
    line = run_blocked("interop", "linscale_jax.interop.convert",
                       ["--from=hf-llama", f"--src={src}", f"--workdir={tmp_path / 'run'}"])
    assert line.startswith("ERROR: safetensors is not installed"), line
    assert not (tmp_path / "run").exists()


def test_study_on_ray_without_the_cluster_extra(tmp_path):
    line = run_blocked("cluster", "linscale_jax.study", ["--config=configs/study/cpu.py", "--backend=ray",
                                                         f"--workdir={tmp_path / 'study'}"])
    assert line.startswith("ERROR: ray is not installed (--backend=ray)"), line
    assert "or use --backend=local." in line, line


def test_train_to_wandb_without_the_track_extra(tmp_path):
    line = run_blocked("track", "linscale_jax.train", [
        "--config=configs/tiny.py:llama", f"--workdir={tmp_path / 'run'}", "--config.train.wandb=project",
        "--config.train.steps=2", "--config.model.n_layers=1", "--config.train.eval_every=0"])
    assert line.startswith("ERROR: wandb is not installed (train.wandb is set)"), line


def test_notebook_runner_without_the_notebook_extra(tmp_path):
    line = run_blocked("notebook", str(REPO / "notebooks" / "run.py"), [], cwd=tmp_path)
    assert line.startswith("ERROR: nbclient is not installed"), line
