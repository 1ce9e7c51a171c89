"""Verified checkpoints: each process hashes the files it wrote, in the background; a restore
checks only its share.

    rec = Recorder(process, processes)   # one per training process
    rec.submit(step_dir)                 # a finalised step: hashed in a background thread
    rec.close()                          # wait for the pending hashes (end of the run)
    problem = verify(step_dir, share)    # None, or a one-line reason (mismatch, missing file, ...)
    plan = scan(workdir)                 # read-only: which step dirs are usable, which are not
    apply(workdir, plan)                 # move the unusable ones to checkpoints_corrupt/ (one line each)

Process k records the sha256 of the files it owns (under `ocdbt.process_<k>/`, `process_<k>`;
process 0 everything else) in step_dir/checksums-p<k>.json = {"algorithm": "sha256", "process": k,
"processes": n, "files": {relative path: hex digest}, "bytes": total}, once Orbax has finalised the
step, in a thread beside training. `verify(step_dir, share=(j, m))` checks the records of the
owners k with k % m == j, so in a restore by m processes every byte is checked by one process;
share=None (eval, load_model) checks all records. A file listed by no record is a problem once
every writer's record exists. A step without records (a kill -9 between Orbax's finalisation and
the hash) is accepted as is. An empty step directory, unreadable metadata, a missing or changed
file make a step unusable: the trainer moves it aside and resumes from the newest usable one
(docs/training.md, "Run integrity"; timings: docs/results.md, "Step loop and checkpoint integrity
at scale").
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import queue
import re
import threading
import time
from dataclasses import dataclass, field

from etils import epath
from linscale_jax import contract
from linscale_jax.errors import UserError

log = logging.getLogger(__name__)

VERIFY_THREADS = min(8, os.cpu_count() or 1)  # a restore hashes files in parallel (GIL released)
RECORD_THREADS = 1  # the background record stays on one core beside the step loop
_RECORD = re.compile(r"^checksums-p(\d+)\.json$")
_OWNER = re.compile(r"^(?:ocdbt\.)?process_(\d+)$")


class CheckpointCorruptError(UserError, RuntimeError):
    """A checkpoint's files do not match the checksums recorded when it was saved."""


def record_name(process: int) -> str:
    return f"checksums-p{int(process)}.json"


def _is_record(name: str) -> bool:
    return bool(_RECORD.match(name)) or name.endswith(".json.tmp")


def owner(rel: str) -> int:
    """The process that wrote a file (path relative to the step dir): k for anything under a
    `ocdbt.process_<k>` directory or named `process_<k>`, else 0."""
    for part in rel.replace(os.sep, "/").split("/"):
        m = _OWNER.match(part)
        if m:
            return int(m.group(1))
    return 0


def _digest(path: epath.Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(4 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _digests(paths, threads: int) -> list[str]:
    """sha256 of each path, `threads` files at a time."""
    if threads <= 1 or len(paths) <= 1:
        return [_digest(p) for p in paths]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return list(pool.map(_digest, paths))


def _walk(d: epath.Path):
    """Every file below d (an explicit walk: epath's rglob is refused on object stores)."""
    for p in d.iterdir():
        if p.is_dir():
            yield from _walk(p)
        else:
            yield p


def _files(step_dir: epath.Path) -> list[epath.Path]:
    return sorted(p for p in _walk(step_dir) if not _is_record(p.name))


def record(step_dir, process: int = 0, processes: int = 1, threads: int = RECORD_THREADS) -> dict:
    """Hash the files `process` owns in step_dir; write step_dir/checksums-p<process>.json
    (atomically) and return it."""
    step_dir = epath.Path(step_dir)
    mine = [p for p in _files(step_dir)
            if owner(rel := str(p.relative_to(step_dir))) == process
            or (process == 0 and owner(rel) >= processes)]
    files = {str(p.relative_to(step_dir)): d for p, d in zip(mine, _digests(mine, threads))}
    out = dict(algorithm="sha256", process=int(process), processes=int(processes), files=files,
               bytes=sum((step_dir / f).stat().length for f in files))
    tmp = step_dir / (record_name(process) + ".tmp")
    tmp.write_text(json.dumps(out, indent=0))
    tmp.replace(step_dir / record_name(process))
    return out


class Recorder:
    """This process's hashing thread: `submit(step_dir)` queues a finalised step, `close()` waits.
    A failure (the step was deleted by max_to_keep meanwhile, a storage error) leaves that step
    without this process's record (accepted as is) and one warning line."""

    def __init__(self, process: int = 0, processes: int = 1):
        self.process, self.processes = int(process), int(processes)
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="linscale-checksums", daemon=True)
        self._thread.start()
        self.seconds = 0.0  # time spent hashing (off the training path)

    def submit(self, step_dir) -> None:
        self._queue.put(epath.Path(step_dir))

    def _run(self) -> None:
        while True:
            step_dir = self._queue.get()
            if step_dir is None:
                return
            t = time.perf_counter()
            try:
                if step_dir.is_dir():
                    record(step_dir, self.process, self.processes)
            except Exception as e:  # noqa: BLE001 - a record is optional; training goes on
                if step_dir.is_dir():
                    print(f"WARNING: could not record checksums of {step_dir} ({type(e).__name__}: "
                          f"{str(e)[:200]}); it will be restored unverified.", flush=True)
            self.seconds += time.perf_counter() - t

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()


def _records(step_dir: epath.Path) -> dict[int, epath.Path]:
    return {int(m.group(1)): step_dir / m.group(0) for m in
            (_RECORD.match(p.name) for p in step_dir.iterdir()) if m}


def has_record(step_dir) -> bool:
    step_dir = epath.Path(step_dir)
    return bool(_records(step_dir))


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


_VERIFIED: dict = {}  # (step dir, share, every file's size and mtime) -> True: scan + restore read once


def _stamp(p: epath.Path) -> tuple:
    """(size, mtime) of a file: nanosecond mtime on local disks, the store's own elsewhere."""
    if "://" not in str(p):
        st = os.stat(p)
        return st.st_size, st.st_mtime_ns
    st = p.stat()
    return st.length, st.mtime


def verify(step_dir, share: tuple[int, int] | None = None) -> str | None:
    """None when step_dir is usable as far as this process checks (its `share` (index, count) of
    the writers' records; None: all of them), else a short reason."""
    step_dir = epath.Path(step_dir)
    problem = structural_problem(step_dir)
    if problem or not has_record(step_dir):
        return problem
    files = _files(step_dir)
    recs = _records(step_dir)
    key = (str(step_dir), share, tuple((str(p), *_stamp(p)) for p in files + list(recs.values())))
    if _VERIFIED.get(key):
        return None
    problem = _verify_files(step_dir, files, recs, share)
    if problem is None:
        _VERIFIED[key] = True
    return problem


def _load(path: epath.Path) -> dict | None:
    try:
        rec = json.loads(path.read_text())
        return rec if isinstance(rec.get("files"), dict) else None
    except (OSError, ValueError, AttributeError):
        return None


def _verify_files(step_dir, files, recs, share) -> str | None:
    index, count = share or (0, 1)
    mine = {k: p for k, p in recs.items() if share is None or k % count == index}
    loaded, expected = {}, {}
    for k, path in sorted(mine.items()):
        rec = _load(path)
        if rec is None:
            return f"{path.name} unreadable"
        loaded[k] = rec
        expected.update(rec["files"])
    for rel in expected:
        if not (step_dir / rel).is_file():
            return f"file {rel} is missing"
    rels = sorted(expected)
    for rel, digest in zip(rels, _digests([step_dir / r for r in rels], VERIFY_THREADS)):
        if digest != expected[rel]:
            return f"checksum mismatch in {rel}"
    # every file named by some record, once every writer recorded (share 0 looks; a listing only)
    if index == 0 and recs:
        first = loaded.get(0) or _load(recs[min(recs)]) or {}
        writers = int(first.get("processes", 1))
        if set(range(writers)) <= set(recs):
            named = set()
            for k in range(writers):
                rec = loaded.get(k) or _load(recs[k])
                if rec is None:
                    return f"{recs[k].name} unreadable"
                named |= set(rec["files"])
            extra = {str(p.relative_to(step_dir)) for p in files} - named
            extra = sorted(e for e in extra if not e.startswith("_CHECKPOINT_METADATA"))
            if extra:  # (Orbax's step metadata may be written after the hash)
                return f"unrecorded file {extra[0]}"
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


def scan(workdir, share: tuple[int, int] | None = None, agree=None) -> Plan:
    """Read-only. Every step dir is checked structurally; from the newest down, this process's
    `share` of the checksums is verified until one passes (older ones are not read: they were
    verified when they were newest or are verified when restored). `agree(problem)` makes the
    processes' verdicts one (every process calls scan with the same dirs)."""
    plan = Plan()
    agree = agree or (lambda p: p)
    for step, p in sorted(step_dirs(workdir).items(), reverse=True):
        if plan.good is not None:
            problem = structural_problem(p)
        else:
            problem = agree(verify(p, share))
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
