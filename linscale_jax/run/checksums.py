"""Verified checkpoints: sha256 of every file of a finished checkpoint, checked before it is used.

    record(step_dir)                  # after Orbax finalised the step: writes step_dir/checksums.json
    problem = verify(step_dir)        # None, or a one-line reason (mismatch, missing file, ...)
    plan = scan(workdir)              # read-only: which step dirs are usable, which are not
    apply(workdir, plan)              # move the unusable ones to checkpoints_corrupt/ (one line each)

checksums.json = {"algorithm": "sha256", "files": {relative path: hex digest}, "bytes": total}. The
trainer records it for each checkpoint once Orbax has finalised it (before the next save starts and
when the run ends). A checkpoint without checksums.json (a kill -9 between Orbax's finalisation and
the record, or a checkpoint from before this module) is accepted as is and recorded on first use.
A step directory that is empty, has unreadable metadata, a missing or changed file is unusable: the
trainer moves it aside and resumes from the newest usable one, so nothing blocks a rerun (Orbax
refuses to save a step whose directory exists).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field

from etils import epath
from linscale_jax import contract
from linscale_jax.errors import UserError

CHECKSUMS = "checksums.json"


class CheckpointCorruptError(UserError, RuntimeError):
    """A checkpoint's files do not match the checksums recorded when it was saved."""


def _digest(path: epath.Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _walk(d: epath.Path):
    """Every file below d (an explicit walk: epath's rglob is refused on object stores)."""
    for p in d.iterdir():
        if p.is_dir():
            yield from _walk(p)
        else:
            yield p


def _files(step_dir: epath.Path) -> list[epath.Path]:
    return sorted(p for p in _walk(step_dir) if p.name != CHECKSUMS)


def record(step_dir) -> dict:
    """Write step_dir/checksums.json (atomically) and return it."""
    step_dir = epath.Path(step_dir)
    files = {str(p.relative_to(step_dir)): _digest(p) for p in _files(step_dir)}
    out = dict(algorithm="sha256", files=files,
               bytes=sum((step_dir / f).stat().length for f in files))
    tmp = step_dir / (CHECKSUMS + ".tmp")
    tmp.write_text(json.dumps(out, indent=0))
    tmp.replace(step_dir / CHECKSUMS)
    return out


def has_record(step_dir) -> bool:
    return (epath.Path(step_dir) / CHECKSUMS).is_file()


def structural_problem(step_dir) -> str | None:
    """Cheap checks: the directory is non-empty and its metadata JSON parses."""
    step_dir = epath.Path(step_dir)
    if not step_dir.is_dir():
        return "not a directory"
    if not any(step_dir.iterdir()):
        return "empty step directory"
    try:
        json.loads((step_dir / contract.CHECKPOINT_METADATA).read_text())
    except OSError:
        return "metadata missing or unreadable"
    except ValueError:
        return "metadata is not valid JSON"
    return None


_VERIFIED: dict = {}  # (step dir, every file's size and mtime) -> True: scan + restore read once


def _stamp(p: epath.Path) -> tuple:
    """(size, mtime) of a file: nanosecond mtime on local disks, the store's own elsewhere."""
    if "://" not in str(p):
        st = os.stat(p)
        return st.st_size, st.st_mtime_ns
    st = p.stat()
    return st.length, st.mtime


def verify(step_dir) -> str | None:
    """None when step_dir is usable, else a short reason."""
    step_dir = epath.Path(step_dir)
    problem = structural_problem(step_dir)
    if problem or not has_record(step_dir):
        return problem
    key = (str(step_dir), tuple((str(p), *_stamp(p)) for p in _files(step_dir) + [step_dir / CHECKSUMS]))
    if _VERIFIED.get(key):
        return None
    problem = _verify_files(step_dir)
    if problem is None:
        _VERIFIED[key] = True
    return problem


def _verify_files(step_dir: epath.Path) -> str | None:
    try:
        rec = json.loads((step_dir / CHECKSUMS).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{CHECKSUMS} unreadable"
    for rel, digest in rec.items():
        p = step_dir / rel
        if not p.is_file():
            return f"file {rel} is missing"
        if _digest(p) != digest:
            return f"checksum mismatch in {rel}"
    extra = {str(p.relative_to(step_dir)) for p in _files(step_dir)} - set(rec)
    if any(not e.startswith("_CHECKPOINT_METADATA") for e in extra):
        return f"unrecorded file {sorted(extra)[0]}"
    return None


def step_dirs(workdir) -> dict[int, epath.Path]:
    d = epath.Path(workdir) / contract.CHECKPOINTS
    if not d.is_dir():
        return {}
    return {int(p.name): p for p in d.iterdir() if p.name.isdigit() and p.is_dir()}


@dataclass
class Plan:
    """Outcome of scan(): `good` the newest verified step (None: none), `bad` {step: reason}."""

    good: int | None = None
    bad: dict = field(default_factory=dict)


def scan(workdir, verify_newest: bool = True) -> Plan:
    """Read-only. Every step dir is checked structurally; from the newest down, checksums are
    verified until one passes (older ones are not read: they were verified when they were newest
    or are verified when restored)."""
    plan = Plan()
    for step, p in sorted(step_dirs(workdir).items(), reverse=True):
        if plan.good is not None:
            problem = structural_problem(p)
        else:
            problem = verify(p) if verify_newest else structural_problem(p)
        if problem:
            plan.bad[step] = problem
        elif plan.good is None:
            plan.good = step
    return plan


def apply(workdir, plan: Plan) -> None:
    """Move the plan's unusable step dirs to checkpoints_corrupt/ with one warning line each."""
    for step, reason in sorted(plan.bad.items()):
        quarantine(workdir, step, CheckpointCorruptError(reason))


def quarantine(workdir, step: int, err: Exception) -> None:
    """Move DIR/checkpoints/<step> to DIR/checkpoints_corrupt/<step>-<time> with one warning line."""
    src = epath.Path(workdir) / contract.CHECKPOINTS / str(step)
    dst = epath.Path(workdir) / contract.CHECKPOINTS_CORRUPT / f"{step}-{int(time.time())}"
    dst.parent.mkdir(parents=True, exist_ok=True)
    src.rename(dst)
    msg = (f"checkpoint step {step} is corrupt or incomplete ({type(err).__name__}: "
           f"{str(err).splitlines()[0][:300]}); moved it to {dst} and falling back to the "
           "previous checkpoint.")
    print(f"WARNING: {msg}", flush=True)


def record_missing(workdir, steps) -> None:
    """Record checksums for finished `steps` that have none (process 0 only; caller's guard)."""
    dirs = step_dirs(workdir)
    for s in steps:
        p = dirs.get(int(s))
        if p is not None and not has_record(p) and structural_problem(p) is None:
            record(p)
