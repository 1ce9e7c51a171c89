"""The core install (pyproject's dependencies, no extras) runs training, eval's val_loss, fit and the
study: their commands' import paths import no torch, transformers, lm-eval, safetensors, notebook,
test, Ray or W&B packages (the [interop], [eval], [notebook], [test], [cluster] and [track] extras:
study.ray_backend and linscale_jax.train.tracking import theirs when asked for).

Each command's modules are imported in a fresh interpreter in which those packages cannot be
imported at all (a meta-path blocker records every attempt), so an eager import anywhere on the
path -- even one inside try/except -- fails the test. The lm-eval tasks' modules are the [eval]
extra's, imported only when those tasks are asked for (linscale_jax/eval/suite.py).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXTRA_PACKAGES = ("torch", "transformers", "lm_eval", "safetensors", "accelerate", "nbclient",
                  "nbformat", "ipykernel", "pytest", "ray", "wandb")
# eval's lm-eval task modules: the [eval] extra (linscale_jax/eval/suite.py imports them only for their tasks)
EVAL_EXTRA = ("linscale_jax.eval.lm_backend", "linscale_jax.eval.perplexity")

PROBE = r"""
import importlib, importlib.abc, json, pkgutil, sys
blocked, walk, entries, skip = json.loads(sys.argv[1])
tried = []

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            tried.append(name)
            raise ImportError(f"{name} is not part of the core install")

sys.meta_path.insert(0, Blocker())
names = list(entries)
for pkg in walk:
    names += [m.name for m in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + ".")
              if not m.name.endswith("__main__") and not any(m.name == s or m.name.startswith(s + ".")
                                                             for s in skip)]
for name in names:
    importlib.import_module(name)
print(json.dumps(dict(imported=len(names), tried=sorted(set(tried)),
                      loaded=sorted(k for k in sys.modules if k.split(".")[0] in blocked))))
"""

# command -> (packages whose every module it may import, its entry modules, modules (and their
# submodules) to leave out).
# One interpreter per group: the absl entry points (train, study, describe) define flags of the same
# names.
COMMANDS = {
    "train + eval val_loss + fit": (
        ["linscale_jax", "kernels_pallas"],
        ["linscale_jax.train.cli", "linscale_jax.eval.__main__", "linscale_jax.fit.cli"],
        ["linscale_jax.models.describe", "linscale_jax.study", *EVAL_EXTRA]),
    "study": (["linscale_jax.study"], ["linscale_jax.study.__main__"], []),
    "describe": ([], ["linscale_jax.models.describe"], []),
}


@pytest.mark.slow  # three fresh interpreters importing jax, tensorflow and every module
@pytest.mark.parametrize("command", list(COMMANDS))
def test_core_commands_import_no_extra(command):
    walk, entries, skip = COMMANDS[command]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps([EXTRA_PACKAGES, walk, entries, skip])],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["imported"] >= len(entries)
    assert got["tried"] == [] and got["loaded"] == [], got
    assert "torch" not in got["loaded"]


def test_the_lm_eval_modules_are_the_eval_extra():
    """The modules left out above do need lm-eval: the exclusion list is not hiding core modules."""
    for name in EVAL_EXTRA:
        source = (REPO / (name.replace(".", "/") + ".py")).read_text()
        assert "\nfrom lm_eval" in source or "\nimport lm_eval" in source, name


def test_requirements_pin_exactly_the_declared_dependencies():
    """requirements.txt (what CI installs) pins every package pyproject.toml declares -- core and
    every extra -- at a version its range accepts, and nothing else (the accelerator extras are
    jax builds: their jax pin is the core one)."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(extras) >= {"tpu", "cuda12", "eval", "interop", "notebook", "test", "cluster", "track"}
    declared = {}
    for spec in project["dependencies"] + [s for name, deps in extras.items() for s in deps]:
        req = Requirement(spec)
        declared.setdefault(canonicalize_name(req.name), []).append(req)
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    assert set(pins) == set(declared), (set(pins) ^ set(declared))
    for name, reqs in declared.items():
        for req in reqs:
            assert req.specifier.contains(pins[name]), (str(req), pins[name])
    assert "tqdm" not in pins  # imported nowhere here; lm-eval and transformers bring their own
    core = {canonicalize_name(Requirement(s).name) for s in project["dependencies"]}
    assert not core & {"torch", "transformers", "lm-eval", "safetensors", "pytest"}
