"""The project's import graph is one-way, read from the source (every import, function-local ones
included):

    kernels_pallas  <-  linscale_jax  <-  eval  <-  study
                         (contract)   <-  fit   <-  study

Nothing imports upward; `fit` reads a table and imports nothing of the project but the stdlib-only
`linscale_jax.contract`; and no two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels_pallas", "linscale_jax", "eval", "fit", "study")
LAYER = {"kernels_pallas": 0, "linscale_jax": 1, "eval": 2, "fit": 2, "study": 3}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _resolve(name: str, mods) -> str | None:
    """The project module an imported name lands in (a.b.c -> the longest known prefix)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in mods:
            return ".".join(parts[:i])
    return None


def _edges(mods) -> dict[str, set[str]]:
    edges = {m: set() for m in mods}
    for m, f in mods.items():
        pkg_of = m if f.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg_of.split(".")[: len(pkg_of.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names] + [base]
            for n in names:
                t = _resolve(n, mods)
                if t and t != m and not m.startswith(t + "."):  # a package's own parents: not an edge
                    edges[m].add(t)
    return edges


def test_no_upward_imports():
    mods = _modules()
    bad = []
    for m, targets in _edges(mods).items():
        src = m.split(".")[0]
        for t in targets:
            dst = t.split(".")[0]
            if src == "fit" and dst != "fit":
                if t != "linscale_jax.contract" and t != "linscale_jax":
                    bad.append(f"{m} -> {t} (fit may import only linscale_jax.contract)")
            elif LAYER[dst] > LAYER[src] or (src != dst and LAYER[dst] == LAYER[src]):
                bad.append(f"{m} -> {t}")
    assert not bad, "imports against the layering:\n" + "\n".join(sorted(bad))


def test_contract_is_stdlib_only():
    tree = ast.parse((ROOT / "linscale_jax" / "contract.py").read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert set(names) <= {"__future__", "csv", "io", "os"}, names


def test_no_module_cycles():
    mods = _modules()
    edges = _edges(mods)
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(mods):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_a_cycle(tmp_path, monkeypatch):
    """The cycle check is not vacuous: two modules that import each other are found."""
    pkg = tmp_path / "study"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from study import b\n")
    (pkg / "b.py").write_text("from study.a import f\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "PACKAGES", ("study",))
    edges = _edges(_modules())
    assert edges["study.a"] == {"study.b"} and edges["study.b"] == {"study.a"}
