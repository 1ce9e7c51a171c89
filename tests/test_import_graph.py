"""The project's import graph is one-way, read from the source (every import, function-local ones
included), by subpackage of linscale_jax (LINSCALE_LAYER):

    contract, errors, axes, palette  <-  console  <-  models  <-  config  <-  parallel  <-  run  <-  data
        <-  interop, train  <-  eval  <-  study  <-  configs
    contract, errors, palette  <-  fit  <-  study

kernels_pallas sits below all of linscale_jax, and the top-level entry folders eval/, fit/ and
study/ above it. Failures are told apart where they are known: storage errors and the command
wrapper in `run` (run.storage, run.command), lost peers in `parallel` (parallel.peers,
parallel.supervise), console capture in `console`; so `data` (whose `prepare` is a command) sits
above `run`. Nothing imports upward or sideways within a layer; `fit` reads a table and imports
nothing of the project but the stdlib-only `linscale_jax.contract`, `linscale_jax.errors` and
`linscale_jax.palette` (the arch colours every figure shares); and no
two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels_pallas", "linscale_jax", "eval", "fit", "study")
# kernels_pallas, then the package, then the thin entry folders of a clone (python -m study, ...)
LAYER = {"kernels_pallas": 0, "linscale_jax": 1, "eval": 2, "fit": 2, "study": 2}
LINSCALE_LAYER = {  # a top-level module or subpackage of linscale_jax -> its level
    "linscale_jax": 0, "contract": 0, "errors": 0, "axes": 0, "palette": 0, "console": 1,
    "models": 2, "config": 3, "parallel": 4, "run": 5, "data": 6, "interop": 7, "train": 7,
    "fit": 8, "eval": 8, "study": 9, "configs": 10,
}
STDLIB_ONLY = ("linscale_jax.contract", "linscale_jax.errors", "linscale_jax.palette")  # what linscale_jax.fit may import
FIT = "linscale_jax.fit"


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


def _is_main_block(node) -> bool:
    """`if __name__ == "__main__":` at a module's top level."""
    t = node.test if isinstance(node, ast.If) else None
    return (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__"
            and len(t.comparators) == 1 and getattr(t.comparators[0], "value", None) == "__main__")


def _edges(mods) -> dict[str, set[str]]:
    edges = {m: set() for m in mods}
    for m, f in mods.items():
        pkg_of = m if f.name == "__init__.py" else m.rpartition(".")[0]
        tree = ast.parse(f.read_text(), str(f))
        entry = {id(n) for block in tree.body if _is_main_block(block) for n in ast.walk(block)}
        for node in ast.walk(tree):
            names = []
            if id(node) in entry:  # a command's `if __name__ == "__main__":` block sits above every layer
                continue
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


def group(m: str) -> str:
    """A module's unit of layering: its top package, or for linscale_jax its subpackage/module."""
    parts = m.split(".")
    return parts[1] if parts[0] == "linscale_jax" and len(parts) > 1 else parts[0]


def upward_imports(edges) -> list[str]:
    bad = []
    for m, targets in edges.items():
        src = m.split(".")[0]
        for t in targets:
            dst = t.split(".")[0]
            if (m == FIT or m.startswith(FIT + ".")) and not (t == FIT or t.startswith(FIT + ".")):
                if t not in STDLIB_ONLY and t != "linscale_jax":
                    bad.append(f"{m} -> {t} ({FIT} may import only {', '.join(STDLIB_ONLY)})")
            elif LAYER[dst] > LAYER[src] or (src != dst and LAYER[dst] == LAYER[src]):
                bad.append(f"{m} -> {t}")
            elif src == dst == "linscale_jax" and group(m) != group(t):
                a, b = LINSCALE_LAYER[group(m)], LINSCALE_LAYER[group(t)]
                if b >= a and group(t) != "linscale_jax":
                    bad.append(f"{m} -> {t} (linscale_jax.{group(m)} is at level {a}, "
                               f"linscale_jax.{group(t)} at {b})")
    return sorted(bad)


def test_no_upward_imports():
    mods = _modules()
    unknown = {group(m) for m in mods if m.startswith("linscale_jax")} - set(LINSCALE_LAYER)
    assert not unknown, f"give these a level in LINSCALE_LAYER: {sorted(unknown)}"
    bad = upward_imports(_edges(mods))
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_stdlib_only_modules():
    for mod in STDLIB_ONLY:
        tree = ast.parse((ROOT / (mod.replace(".", "/") + ".py")).read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        assert set(names) <= {"__future__", "argparse", "csv", "io", "os", "sys", "zlib"}, (mod, names)


def cycles_of(edges) -> list[str]:
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

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return cycles


def test_no_module_cycles():
    cycles = cycles_of(_edges(_modules()))
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
    assert cycles_of(edges) == ["study.a -> study.b -> study.a"]


def test_the_checker_sees_an_upward_import():
    """The layering check is not vacuous: models importing train, and fit importing eval, are found."""
    edges = {"linscale_jax.models.tnl": {"linscale_jax.train.loop"},
             "linscale_jax.fit.api": {"linscale_jax.eval.runner"},
             "linscale_jax.train.loop": {"linscale_jax.models.tnl"}}
    assert upward_imports(edges) == [
        "linscale_jax.fit.api -> linscale_jax.eval.runner (linscale_jax.fit may import only "
        "linscale_jax.contract, linscale_jax.errors, linscale_jax.palette)",
        "linscale_jax.models.tnl -> linscale_jax.train.loop (linscale_jax.models is at level 2, "
        "linscale_jax.train at 7)"]
