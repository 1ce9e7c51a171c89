"""Execute a notebook headless: python notebooks/run.py [--notebook=notebooks/explore.ipynb] [--out=FILE]

Runs every code cell in order in a Python kernel of this interpreter (the [notebook] extra:
nbclient, nbformat, ipykernel), with the notebook's folder as the working directory, and prints
each cell's text output. --out writes the executed notebook (outputs and images) there. A cell that
fails is one line naming the cell and its exception (ERROR: ...; exit status 1); the traceback goes
to the log the line names. The environment passes to the kernel: EXPLORE_STEPS=30 shortens
explore.ipynb's training run, LINSCALE_SOURCE is where its first cell installs the project from
when the project is not importable, JAX_PLATFORMS picks the platform (default: the runtime's own).
"""

from __future__ import annotations

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if importlib.util.find_spec("linscale_jax") is None:  # not installed: the clone's, for the one-line errors
    sys.path.insert(0, os.path.dirname(HERE))

from linscale_jax.errors import ArgumentParser, UserError  # noqa: E402


class CellError(UserError, RuntimeError):
    """A cell raised: its number, first line and exception."""


def execute(path: str, timeout: int = 1200, log=print):
    """Run the notebook at `path` top to bottom; returns the executed nbformat notebook."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        index = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                      and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        first = nb.cells[index].source.splitlines()[0] if index is not None else "?"
        raise CellError(f"{path}: cell {index} ({first[:60]!r}) raised {e.ename}: {e.evalue[:300]}; fix the "
                        "cell (its output in --out has the traceback)") from e
    for i, cell in enumerate(nb.cells):
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if cell.cell_type == "code")
        if text.strip():
            log(f"--- cell {i}\n{text.rstrip()}")
    return nb


def main(argv=None) -> int:
    p = ArgumentParser(prog="python notebooks/run.py", description=__doc__.split("\n\n")[1])
    p.add_argument("--notebook", default=os.path.join(HERE, "explore.ipynb"), help="the notebook to run")
    p.add_argument("--out", default=None, help="write the executed notebook here")
    p.add_argument("--timeout", type=int, default=1200, help="seconds a cell may take")
    a = p.parse_args(argv)
    from linscale_jax.run import command

    def run():
        nb = execute(a.notebook, a.timeout)
        if a.out:
            import nbformat

            nbformat.write(nb, a.out)
        images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
        print(f"ran {a.notebook}: {sum(c.cell_type == 'code' for c in nb.cells)} code cells, {images} images",
              flush=True)

    return command.run(run, command="notebook")


if __name__ == "__main__":
    sys.exit(main())
