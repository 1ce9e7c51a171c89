"""notebooks/explore.ipynb executes top to bottom (nbclient, CPU), so the notebook cannot rot.

CI runs it with EXPLORE_STEPS=30 (a shortened training run); users get the default 300 steps.
"""

import os

import pytest

pytestmark = pytest.mark.slow  # over 30 s on 2 CPU cores: deselect with -m "not slow"

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(ROOT, "notebooks", "explore.ipynb")


def test_explore_notebook_executes(monkeypatch):
    monkeypatch.setenv("EXPLORE_STEPS", "30")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}})
    client.execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "loss" in outputs and "alpha=" in outputs
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 2  # the loss curve and the fit
