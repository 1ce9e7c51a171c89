"""notebooks/explore.ipynb executes top to bottom (notebooks/run.py, nbclient, CPU) in a clean copy
of the repository (the files git tracks, in a temp dir with nothing beside it), so the notebook
cannot rot and reads nothing from outside the repository: the kernel imports the copy's packages
(PYTHONPATH, so its first cell installs nothing) and finds every file from the package, not from
its working directory. .ci/py312 runs it again under Python 3.12, where the first cell installs the
project from a copy.

CI runs it with EXPLORE_STEPS=30 (a shortened training run); users get the default 300 steps.
"""

import importlib.util
import os
import shutil
import subprocess

import nbclient  # noqa: F401  (the [notebook] extra: in requirements.txt, so CI runs this test, never skips it)
import nbformat
import pytest

pytestmark = pytest.mark.slow  # over 30 s on 2 CPU cores: deselect with -m "not slow"

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def clean_clone(dest: str) -> str:
    """Copy the repository's files as a clone has them (tracked, plus untracked files git does not
    ignore, so uncommitted work is tested too) into dest/repo; no git (a source archive): the tree
    without caches. Returns the copy's root."""
    root = os.path.join(dest, "repo")
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns(".git", "__pycache__", ".venv"))
        return root
    for rel in filter(None, listed.decode().split("\0")):
        src = os.path.join(ROOT, rel)
        if os.path.islink(src):  # configs -> linscale_jax/configs
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            os.symlink(os.readlink(src), os.path.join(root, rel))
        elif os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(root, rel))
    return root


def test_explore_notebook_executes(monkeypatch, tmp_path):
    root = clean_clone(str(tmp_path))
    notebook = os.path.join(root, "notebooks", "explore.ipynb")
    monkeypatch.setenv("EXPLORE_STEPS", "30")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("PYTHONPATH", root)  # importable: the first cell installs nothing
    monkeypatch.setenv("LINSCALE_SOURCE", str(tmp_path / "nowhere"))
    nb = nbformat.read(notebook, as_version=4)
    assert not any("JAX_PLATFORMS" in c.source or "getcwd" in c.source for c in nb.cells)  # the runtime's own
    nb.cells.append(nbformat.v4.new_code_cell(
        "import kernels_pallas, linscale_jax, linscale_jax.eval, linscale_jax.fit\n"
        "print('PACKAGES', *(m.__file__ for m in (linscale_jax.eval, linscale_jax.fit, kernels_pallas, linscale_jax)))"))
    elsewhere = tmp_path / "elsewhere"  # the kernel's working directory: neither the clone nor notebooks/
    elsewhere.mkdir()
    path = str(elsewhere / "explore.ipynb")
    nbformat.write(nb, path)
    nb = runner(root).execute(path, timeout=600, log=lambda *_: None)
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "loss" in outputs and "alpha=" in outputs and "installing" not in outputs
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 2  # the loss curve and the fit
    # the kernel ran the copy's packages (not the checkout's, nor an installed copy)
    where = nb.cells[-1].outputs[0]["text"].split()
    assert where[0] == "PACKAGES" and all(os.path.realpath(p).startswith(os.path.realpath(root))
                                          for p in where[1:]), where


def runner(root):
    """notebooks/run.py of the copy, as a module."""
    spec = importlib.util.spec_from_file_location("notebook_run", os.path.join(root, "notebooks", "run.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
