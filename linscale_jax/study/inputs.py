"""Files a study reads from another study (or that a later command reads back), checked before use:
a bad value is one line naming the file, the row (or JSON entry) and the fix, never a verdict.

    rows = recall_rows(R + "/recall.csv", ...)       # study.recall_from (via study.recall.table.read_csv)
    found = findings(D + "/findings.json")           # study.protocol_from, calibrate, report
    cal = calibration(D + "/calibration.json")       # None when there is none
    other = other_protocol(D, design)                # study.protocol_from: the same runs, another rule

recall.csv: every column (study.recall.table.COLUMNS) in every row; integers where integers are
written; accuracy and its interval finite in [0, 1]; the learning rate finite and > 0; the query loss
finite except in a cell that did not train (a diverged run's loss); a known status; a truncated row
is named as such. JSON files: complete, an object, no NaN or infinity anywhere (the study writes
them as null), and the entries their readers use. protocol_from: the other learning-rate protocol
on the same runs: the same archs, sizes, tokens and data, a different optim.rule.
"""

from __future__ import annotations

import csv
import json
import math
import os

from linscale_jax.errors import UserError


class InputError(UserError, ValueError):
    """A file from another study is damaged or is not what the study needs (message: the file,
    the row or entry, and the fix)."""


RECALL_FIX = ("re-run the recall study's command on its workdir to rewrite it (its stored runs are "
              "reused), or drop --config.recall_from")
RECALL_INTS = ("d_model", "n_pairs", "seq_len", "state_floats", "head_dim", "n_layers", "steps", "queries",
               "n_params", "usable_state_floats", "max_steps")
RECALL_SHARES = ("accuracy", "ci_low", "ci_high")


def recall_rows(path: str, columns: tuple, statuses: tuple, did_not_train: str) -> list[dict]:
    """recall.csv's rows with numeric fields (seed stays a string: an integer or "all"), every
    value checked (module docstring); the recall study's `columns`, `statuses` and the status of
    a cell that did not train (study.recall.table)."""
    try:
        f = open(path, newline="")
    except OSError as e:
        raise InputError(f"cannot read {path} ({e.strerror or e}); {RECALL_FIX}") from None
    with f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{path} lacks the columns {', '.join(missing)}; {RECALL_FIX}")
        rows = []
        for n, raw in enumerate(reader, 2):  # line 1 is the header
            where = f"{path} row {n}"
            if None in raw or any(raw.get(c) is None for c in columns):
                got = sum(v is not None for k, v in raw.items() if k is not None)
                raise InputError(f"{where} has {got} of {len(reader.fieldnames)} fields (truncated or "
                                 f"edited?); {RECALL_FIX}")
            row = {}
            for k, v in raw.items():
                if k in RECALL_INTS:
                    row[k] = _number(v, int, where, k)
                elif k in RECALL_SHARES or k in ("lr", "test_loss"):
                    row[k] = _number(v, float, where, k)
                else:
                    row[k] = v
            for k in RECALL_SHARES:
                if not 0.0 <= row[k] <= 1.0:
                    raise InputError(f"{where}: {k} is {raw[k]!r}, not a share in [0, 1]; {RECALL_FIX}")
            if not (math.isfinite(row["lr"]) and row["lr"] > 0):
                raise InputError(f"{where}: lr is {raw['lr']!r}, not a finite rate > 0; {RECALL_FIX}")
            if not math.isfinite(row["test_loss"]) and row["status"] != did_not_train:
                raise InputError(f"{where}: test_loss is {raw['test_loss']!r} in a cell with status "
                                 f"{row['status']!r} (only a cell that did not train may have no finite "
                                 f"loss); {RECALL_FIX}")
            if row["status"] not in statuses:
                raise InputError(f"{where}: status is {row['status']!r}, not one of {', '.join(statuses)}; "
                                 f"{RECALL_FIX}")
            if not row["arch"] or not (row["seed"] == "all" or row["seed"].isdigit()):
                raise InputError(f"{where}: arch {row['arch']!r} and seed {row['seed']!r} must name an arch "
                                 f"and a seed (an integer or all); {RECALL_FIX}")
            rows.append(row)
    if not rows:
        raise InputError(f"{path} has no rows; {RECALL_FIX}")
    return rows


def _number(text, kind, where: str, column: str):
    """`text` as an int, or a float (finite; a test_loss may be NaN, which the caller judges);
    InputError naming the row and column."""
    try:
        x = float(text)
    except (TypeError, ValueError):
        x = None
    if kind is int:
        value = int(x) if x is not None and math.isfinite(x) and x == int(x) else None
    else:
        value = x if x is not None and (math.isfinite(x) or (column == "test_loss" and math.isnan(x))) else None
    if value is None:
        want = "an integer" if kind is int else "a finite number"
        raise InputError(f"{where}: {column} is {text!r}, not {want}; {RECALL_FIX}")
    return value


def read_json(path: str, fix: str) -> dict:
    """The JSON object in `path`: InputError naming the file and the fix when it is missing,
    truncated or malformed, not an object, or holds NaN or infinity (at the entry named)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"cannot read {path} ({e.strerror or e}); {fix}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        at = f", line {e.lineno} column {e.colno}" if hasattr(e, "lineno") else ""
        raise InputError(f"{path} is not valid JSON ({getattr(e, 'msg', e)}{at}; truncated or edited?); "
                         f"{fix}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path} holds a JSON {type(doc).__name__}, not an object; {fix}")
    bad = _non_finite(doc)
    if bad is not None:
        raise InputError(f"{path}: {bad[0]} is {bad[1]} (the study writes no NaN or infinity: the file "
                         f"was changed or damaged); {fix}")
    return doc


def _non_finite(x, at: str = ""):
    """(the entry's path, value) of the first NaN or infinity in a JSON document, else None."""
    if isinstance(x, float) and not math.isfinite(x):
        return at or "the document", x
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        found = _non_finite(v, f"{at}[{k}]" if isinstance(k, int) else f"{at}.{k}" if at else str(k))
        if found is not None:
            return found
    return None


def _need(doc: dict, keys: dict, path: str, fix: str, at: str = "") -> None:
    """Each key of `keys` present in `doc` with a value of its type."""
    for k, kind in keys.items():
        if not isinstance(doc.get(k), kind):
            got = "missing" if k not in doc else f"a {type(doc[k]).__name__}"
            raise InputError(f"{path}: entry {at}{k} is {got}, not a {kind.__name__}; {fix}")


def findings(path: str, fix: str | None = None) -> dict:
    """A study's findings.json, checked (read_json, and the entries its readers use)."""
    workdir = os.path.dirname(path) or "."
    fix = fix or (f"re-run `python -m linscale_jax.study --config=... --workdir={workdir} --join_only` "
                  "to write it again")
    found = read_json(path, fix)
    _need(found, {"findings": dict}, path, fix)
    return found


def calibration(path: str) -> dict | None:
    """DIR/calibration.json (study.calibrate), checked; None when there is none."""
    if not os.path.exists(path):
        return None
    workdir = os.path.dirname(path) or "."
    fix = (f"delete it and re-run `python -m linscale_jax.study --config=calibrate --workdir={workdir}` (the report "
           "leaves the calibration out until then)")
    cal = read_json(path, fix)
    _need(cal, {"designs": list}, path, fix)
    for i, d in enumerate(cal["designs"]):
        if not isinstance(d, dict):
            raise InputError(f"{path}: entry designs[{i}] is not an object; {fix}")
        _need(d, {"design": str, "cases": list, "scenarios": list, "summary": str, "command": str,
                  "cost": dict}, path, fix, f"designs[{i}].")
        for j, c in enumerate(d["cases"]):
            at = f"designs[{i}].cases[{j}]"
            if not isinstance(c, dict):
                raise InputError(f"{path}: entry {at} is not an object; {fix}")
            for k in ("better", "worse", "equivalent", "not_resolved"):
                v = c.get(k)
                if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0):
                    raise InputError(f"{path}: {at}.{k} is {v!r}, not a share in [0, 1]; {fix}")
    return cal


SAME_RUNS = ("archs", "sizes", "tokens", "tokens_by_size", "seq_len", "data_task", "vocab")


def other_protocol(src: str, mine: dict) -> dict:
    """findings.json of the study at `src` (study.protocol_from), which must be the other
    learning-rate protocol on this study's runs (`mine`: this study's design,
    study.scaling.results.design):
    the same SAME_RUNS entries of its design and a different optim.rule (InputError naming what
    differs and the fix otherwise)."""
    from linscale_jax.study import files

    path = files.study_path(src, files.FINDINGS_JSON)
    fix = ("pass a finished study of the same archs, sizes and tokens under the other learning-rate "
           "rule (optim.rule=paper against tuned: configs/study/cpu.py and cpu_paper.py), or drop "
           "--config.protocol_from")
    other = findings(path, f"re-run that study (`python -m linscale_jax.study --config=... --workdir={src} "
                           f"--join_only`) to write it again, or drop --config.protocol_from")
    _need(other, {"design": dict}, path, "re-run that study with --join_only to write it again, or drop "
          "--config.protocol_from")
    theirs = other["design"]

    def norm(k, v):
        if k in ("archs", "sizes"):
            return sorted(str(x) for x in (v or []))
        if k == "tokens":
            return None if v is None else float(v)
        return v

    differ = [k for k in SAME_RUNS if norm(k, mine.get(k)) != norm(k, theirs.get(k))]
    if differ:
        detail = "; ".join(f"{k} {theirs.get(k)!r} there, {mine.get(k)!r} here" for k in differ)
        raise InputError(f"study.protocol_from={src!r} did not train this study's runs ({detail}); {fix}")
    if theirs.get("protocol") in (None, "") or theirs.get("protocol") == mine.get("protocol"):
        raise InputError(f"study.protocol_from={src!r} ran under optim.rule={theirs.get('protocol')!r}, "
                         f"and so does this study ({mine.get('protocol')!r}): both protocols would be the "
                         f"same one; {fix}")
    return other
