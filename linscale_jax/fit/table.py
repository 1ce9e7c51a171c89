"""Loading and validating the training-curve table that every fit consumes.

One row per recorded point of a training run. Columns (extra columns are ignored):

    arch      architecture name (tnl, hgrn2, cosformer2, llama, ...)
    run       run name, unique within an arch (one model size / seed / schedule)
    step      optimizer step of the point
    n_params  non-embedding parameter count N of the run (constant along the run)
    tokens    training tokens seen so far, D
    flops     training FLOPs so far, C (input is always FLOPs; see ``PF_DAY``)
    loss      loss at that point (nats)

Sources: a CSV or JSONL file with those columns, or a directory of trainer workdirs (each with
``metrics.jsonl``; arch / run / n_params come from ``run.json`` beside it or from the latest
checkpoint's metadata). Every problem raises ``FitError`` with a message that names the fix.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from linscale_jax import contract  # the one module of the project fit reads (stdlib only)
from linscale_jax.errors import UserError

PF_DAY = contract.PF_DAY  # FLOPs in one PFLOP/s-day, the paper's compute unit.
COLUMNS = contract.TABLE_COLUMNS
NUMERIC = ("step", "n_params", "tokens", "flops", "loss")
POSITIVE = ("n_params", "tokens", "flops", "loss")


class FitError(UserError, ValueError):
    """Bad input or an impossible fit; the message says what is wrong and how to fix it."""


@dataclasses.dataclass(frozen=True)
class Table:
    """Columns as aligned 1-D arrays (length = number of rows)."""

    arch: np.ndarray  # str
    run: np.ndarray  # str
    step: np.ndarray  # float64
    n_params: np.ndarray
    tokens: np.ndarray
    flops: np.ndarray
    loss: np.ndarray
    source: str = "<memory>"

    def __len__(self) -> int:
        return len(self.loss)

    @property
    def archs(self) -> list[str]:
        return sorted(set(self.arch.tolist()))

    def take(self, index) -> "Table":
        cols = {c: getattr(self, c)[index] for c in COLUMNS}
        return Table(**cols, source=self.source)

    def select(self, arch: str) -> "Table":
        return self.take(self.arch == arch)

    def runs(self) -> list[tuple[str, "Table"]]:
        """Per run (sorted by n_params, then name): the run's rows sorted by flops."""
        out = []
        for name in sorted(set(self.run.tolist())):
            sub = self.take(self.run == name)
            out.append((name, sub.take(np.argsort(sub.flops, kind="stable"))))
        out.sort(key=lambda item: (item[1].n_params[0], item[0]))
        return out

    def with_compute_unit(self, unit: str) -> "Table":
        """Same table with ``flops`` expressed in ``unit`` ('flops' or 'pf-days')."""
        return dataclasses.replace(self, flops=self.flops / compute_scale(unit))


def compute_scale(unit: str) -> float:
    if unit == "flops":
        return 1.0
    if unit == "pf-days":
        return PF_DAY
    raise FitError(f"unknown compute unit {unit!r}; use 'flops' or 'pf-days'")


def from_columns(source: str = "<memory>", **columns) -> Table:
    """Build and validate a Table from column sequences (the keys of ``COLUMNS``)."""
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise FitError(
            f"{source}: missing column(s) {', '.join(missing)}; the table needs "
            f"{', '.join(COLUMNS)} (n_params = non-embedding parameters, flops = training FLOPs "
            "so far). Add or rename the column(s).")
    n = len(columns["loss"])
    cols = {}
    for c in COLUMNS:
        values = list(columns[c])
        if len(values) != n:
            raise FitError(f"{source}: column {c} has {len(values)} values but loss has {n}")
        if c in NUMERIC:
            cols[c] = _to_float(values, c, source)
        else:
            cols[c] = np.asarray([str(v) for v in values], dtype=object)
    table = Table(**cols, source=source)
    validate(table)
    return table


def _to_float(values, column, source) -> np.ndarray:
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            raise FitError(f"{source}: row {i + 1}, column {column}: {v!r} is not a number; "
                           "fix or drop that row") from None
    return out


def validate(table: Table) -> None:
    """Raise FitError on NaN/inf, non-positive values, or n_params changing within a run."""
    src = table.source
    if len(table) == 0:
        raise FitError(f"{src}: the table has no rows; point --table at a file with data")
    for c in NUMERIC:
        bad = ~np.isfinite(getattr(table, c))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FitError(
                f"{src}: {int(bad.sum())} row(s) have NaN/inf {c} (first: run {table.run[i]!r}, "
                f"step {table.step[i]:g}); drop diverged or unfinished points before fitting")
    for c in POSITIVE:
        bad = getattr(table, c) <= 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FitError(
                f"{src}: {int(bad.sum())} row(s) have {c} <= 0 (first: run {table.run[i]!r}, "
                f"step {table.step[i]:g}); fits work in log space, so drop those rows "
                "(e.g. the step-0 point) or fix the column")
    keys = list(zip(table.arch.tolist(), table.run.tolist()))
    seen: dict[tuple, float] = {}
    for key, n in zip(keys, table.n_params.tolist()):
        if seen.setdefault(key, n) != n:
            raise FitError(f"{src}: run {key[1]!r} ({key[0]}) has several n_params values; "
                           "each run must be one model size - give each size its own run name")


def require(table: Table, *, min_runs: int, min_points_per_run: int, what: str) -> None:
    """Check there is enough data for ``what`` (per arch); FitError names the shortfall."""
    runs = table.runs()
    if len(runs) < min_runs:
        arch = table.arch[0] if len(table) else "?"
        raise FitError(f"{what} for arch {arch!r} needs at least {min_runs} runs (model sizes), "
                       f"got {len(runs)}; train more sizes or use another approach")
    for name, run in runs:
        if len(run) < min_points_per_run:
            raise FitError(f"{what}: run {name!r} has {len(run)} point(s), needs at least "
                           f"{min_points_per_run}; log more checkpoints or drop the run")


def log_curves(table: Table) -> list[tuple]:
    """Per run (sorted by N): (name, N, ln C [p], ln L [p], ln D [p]), strictly increasing ln C.

    Points recorded at the same compute are averaged (in log space).
    """
    curves = []
    for name, run in table.runs():
        lc, inverse = np.unique(np.log(run.flops), return_inverse=True)
        count = np.bincount(inverse)
        ll = np.bincount(inverse, np.log(run.loss)) / count
        ld = np.bincount(inverse, np.log(run.tokens)) / count
        curves.append((name, float(run.n_params[0]), lc, ll, ld))
    return curves


def load(path: str | Path) -> Table:
    """Load a CSV file, a JSONL file, or a directory of trainer workdirs (see module doc)."""
    path = Path(path)
    if not path.exists():
        raise FitError(f"table {path} does not exist; pass a CSV, JSONL or a runs directory")
    if path.is_dir():
        return _load_workdirs(path)
    if path.name == contract.METRICS:  # one trainer workdir
        return _load_metrics([path], str(path))
    if path.suffix == ".csv":
        return _load_csv(path)
    if path.suffix in (".jsonl", ".json"):
        return from_columns(str(path), **_columns(_read_jsonl(path), str(path)))
    raise FitError(f"{path}: unknown table format {path.suffix!r}; use .csv, .jsonl or a directory")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise FitError(f"{path} is not UTF-8 ({e}); re-export it as UTF-8 text") from None


def _load_csv(path: Path) -> Table:
    names, rows = contract.read_table_csv(_read_text(path))
    if not names:
        raise FitError(f"{path} is empty; it needs a header row with {', '.join(COLUMNS)}")
    return from_columns(str(path), **_columns(rows, str(path), names))


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for i, line in enumerate(_read_text(path).splitlines()):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise FitError(f"{path}: line {i + 1} is not valid JSON ({e.msg}); fix or delete it") \
                from None
    return rows


def _columns(rows: list[dict], source: str, names=None) -> dict:
    names = set(names) if names is not None else set().union(*rows) if rows else set()
    return {c: [r.get(c) for r in rows] for c in COLUMNS if c in names}


def _run_metadata(workdir: Path) -> dict:
    """run.json if present, else the newest checkpoint's metadata JSON (arch, n_params, ...)."""
    meta_file = workdir / contract.RUN_JSON
    if meta_file.exists():
        return json.loads(_read_text(meta_file))
    ckpts = workdir / contract.CHECKPOINTS
    steps = sorted((int(p.name) for p in ckpts.glob("*") if p.name.isdigit()), reverse=True)
    for step in steps:
        try:
            return json.loads((ckpts / str(step) / contract.CHECKPOINT_METADATA).read_text())
        except (OSError, ValueError):
            continue
    return {}


def _load_workdirs(root: Path) -> Table:
    """Every ``metrics.jsonl`` in root or its sub-folders is one run."""
    files = sorted(root.glob(contract.METRICS)) + sorted(root.glob("*/" + contract.METRICS))
    if not files:
        raise FitError(f"{root}: no metrics.jsonl in it or its sub-folders; point --table at "
                       "a trainer workdir, a folder of workdirs, or a CSV/JSONL table")
    return _load_metrics(files, str(root))


def _load_metrics(files: list[Path], source: str) -> Table:
    """One run per metrics.jsonl; arch / run / n_params from its rows, run.json or checkpoints."""
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    for f in files:
        meta = _run_metadata(f.parent)
        rows = [r for r in _read_jsonl(f) if r.get("loss") is not None]
        for key in ("arch", "n_params"):
            if key not in meta and not all(key in r for r in rows):
                raise FitError(
                    f"{f.parent}: cannot tell the run's {key}; write {f.parent / 'run.json'} "
                    'with {"arch": "tnl", "n_params": 123456} (non-embedding parameters)')
        for r in rows:
            r = {**r, "arch": r.get("arch", meta.get("arch")),
                 "run": r.get("run", meta.get("run", f.parent.name)),
                 "n_params": r.get("n_params", meta.get("n_params"))}
            for c in COLUMNS:
                cols[c].append(r.get(c))
        missing = [c for c in ("step", "tokens", "flops") if rows and rows[0].get(c) is None]
        if missing:
            raise FitError(f"{f}: metrics lines lack {', '.join(missing)}; the trainer must log "
                           "step, tokens and flops with every loss")
    return from_columns(source, **cols)


def write_csv(table: Table, path: str | Path) -> None:
    """Write ``table`` as a CSV that ``load`` reads back (the contract's one table writer)."""
    contract.write_table_csv(
        [{c: _fmt(getattr(table, c)[i]) for c in COLUMNS} for i in range(len(table))], path)


def _fmt(v):
    if isinstance(v, float) and math.isfinite(v) and v == int(v) and abs(v) < 1e15:
        return int(v)
    return repr(float(v)) if isinstance(v, float) else v


def recount(table: Table, counts: dict) -> Table:
    """The same table with each run's n_params replaced by another parameter count (e.g. with the
    embedding and the head: Pearce & Song 2024, Porian et al. 2024). counts: {arch: {table n_params:
    new count}}; a size without an entry is a FitError naming it."""
    new = np.empty(len(table))
    for i, (a, n) in enumerate(zip(table.arch.tolist(), table.n_params.tolist())):
        try:
            new[i] = float(counts[a][float(n)])
        except KeyError:
            raise FitError(f"{table.source}: no parameter count for {a} at n_params={n:g}; give counts[{a!r}]"
                           f"[{n:g}] (the runs' accounting)") from None
    out = dataclasses.replace(table, n_params=new)
    validate(out)
    return out
