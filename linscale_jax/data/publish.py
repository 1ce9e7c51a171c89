"""Writing a prepared directory: each version beside the others, published by one atomic write.

    with publish.Writer(out, version, recipe, shard, shards, log) as w:
        if w.todo:                                 # this shard's files are not written yet
            ... write w.stage/<split>.array_record ...
            w.commit(stats)                         # moves them in, records their sizes and sha256
        w.publish(inputs)                           # dataset.json, once every shard is there

A version (`v-<hash>`, the hash of the recipe and of the inputs' paths, sizes and modification
times) is written into DIR/<version>/ while readers keep reading the version dataset.json names.
Each shard's files are staged, moved into place, hashed, and recorded in the shard's
DIR/<version>/shard-i-of-n.json; the process that finds every shard recorded writes dataset.json,
listing every file's size and sha256 and the fingerprints (data.records) — the last write, and one
atomic step (a rename; one object write on gs://). A version is never written again once
published: re-preparing changed inputs writes a new version beside it.

Local directories are locked: DIR/.lock (exclusive, briefly) around the scan and the publish, and
DIR/.lock-<version> (shared) by every process writing that version, so the processes of one
version (the hosts of a multi-host prepare, two prepares of the same inputs) work together, and
a version whose lock nobody holds was left by a prepare that died. The scan refuses in one line
when DIR holds the records of another recipe (other inputs, options, vocabulary or seq_len) or
another prepare is writing another version, and removes versions left unpublished by dead
prepares, superseded versions, and staging directories whose process died (each process holds a
lock in its own). A gs:// directory has no locks: an unfinished version of other inputs is refused
with the command that removes it; its staging is local ($TMPDIR/linscale-prepare-*).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import tempfile

from etils import epath

from linscale_jax.data import records
from linscale_jax.data.errors import DataError

LOCK = ".lock"
STAGE = ".stage-"  # DIR/<version>/.stage-*: one process's files before they move in (locked while it lives)
REMOTE_STAGE = "linscale-prepare-"  # $TMPDIR/linscale-prepare-*: the same for a gs:// output


def remote(path) -> bool:
    return str(path).startswith(("gs://", "s3://"))


@contextlib.contextmanager
def flock(path: str, mode: int):
    """flock `path` (created if missing) with `mode` (fcntl.LOCK_SH / LOCK_EX, | LOCK_NB to fail
    with BlockingIOError instead of waiting); retried when the file was replaced meanwhile."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, mode)
            if os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield fd
    finally:
        os.close(fd)  # releases the lock


def file_sha256(path: str) -> tuple[int, str]:
    """(size, sha256 hex) of a local file."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def _write_json(path: epath.Path, obj: dict) -> None:
    """One atomic write: a local rename, or one object write."""
    text = json.dumps(obj, indent=1, sort_keys=True)
    if remote(path):
        path.write_text(text)
        return
    tmp = f"{path}.tmp-{socket.gethostname()}-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, str(path))


def size_text(n: float) -> str:
    units = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "bytes"))
    return next(f"{n / k:,.1f} {u}" for k, u in units if n >= k or k == 1)


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
               if os.path.isfile(os.path.join(d, f)))


class Writer:
    """One process's part in writing version `version` of `out` (see the module docstring)."""

    def __init__(self, out: str, version: str, recipe: dict, shard: int, shards: int, log=print,
                 pause=lambda point: None):
        self.out, self.root, self.version = str(out), epath.Path(out), version
        self.recipe = json.loads(json.dumps(recipe))  # as dataset.json holds it
        self.shard, self.shards, self.log, self._pause = shard, shards, log, pause
        self.local = not remote(out)
        self.stage = None  # this process's staging directory (local path)
        self.todo = True  # this shard's files are still to be written
        self.published = False  # dataset.json names this version
        self._locks = contextlib.ExitStack()
        self._created = False  # this process made the directory

    # ------------------------------------------------------------------ scan and claim

    def __enter__(self):
        try:
            if self.local:
                self._created = not os.path.isdir(self.out)
                os.makedirs(self.out, exist_ok=True)
                with flock(os.path.join(self.out, LOCK), fcntl.LOCK_EX):
                    self._scan()
                    self._locks.enter_context(flock(self._version_lock(self.version), fcntl.LOCK_SH))
                    (self.root / self.version).mkdir(parents=True, exist_ok=True)
                    self._status()
                    self._make_stage(str(self.root / self.version), STAGE)
            else:
                self._scan()
                self._status()
                tmp = tempfile.gettempdir()
                with flock(os.path.join(tmp, f"{REMOTE_STAGE}lock"), fcntl.LOCK_EX):
                    self._make_stage(tmp, REMOTE_STAGE)
        except BaseException:
            self._locks.close()
            raise
        return self

    def _make_stage(self, where: str, prefix: str) -> None:
        """Remove the staging dirs under `where` whose process died (nobody holds their lock), then
        make and lock this process's own when its shard is to be written."""
        with contextlib.suppress(FileNotFoundError):
            for name in sorted(os.listdir(where)):
                path = os.path.join(where, name)
                if not name.startswith(prefix) or not os.path.isdir(path):
                    continue
                with contextlib.suppress(BlockingIOError, FileNotFoundError):
                    with flock(os.path.join(path, LOCK), fcntl.LOCK_EX | fcntl.LOCK_NB):
                        size = dir_bytes(path)
                        shutil.rmtree(path)
                        self.log(f"  removed {path} ({size_text(size)}), staging of a prepare that died")
        if self.todo:
            self.stage = tempfile.mkdtemp(prefix=prefix, dir=where)
            self._locks.enter_context(flock(os.path.join(self.stage, LOCK), fcntl.LOCK_EX))

    def _version_lock(self, version: str) -> str:
        return os.path.join(self.out, f"{LOCK}-{version}")

    def manifest(self) -> dict | None:
        path = self.root / records.MANIFEST
        return records.read_json(path) if path.exists() else None

    def _scan(self) -> None:
        """Refuse another recipe or a live writer of another version; remove what dead prepares left."""
        published = self.manifest()
        if published is not None:
            theirs = {k: published.get(k) for k in records.RECIPE}
            if theirs != self.recipe:
                diff = sorted(k for k in records.RECIPE if theirs[k] != self.recipe[k])
                raise DataError(f"{self.out} holds the records of other inputs or options (differing: "
                                f"{', '.join(diff)}; source {published.get('source')}); pass another --out, or "
                                f"remove {self.out} first to replace them")
        keep = {self.version, (published or {}).get("version")}
        for d in sorted(self.root.glob("v-*")) if self.root.is_dir() else []:
            if d.name in keep:
                continue
            if not self.local:
                if d.name == (published or {}).get("previous"):  # superseded by the published version
                    d.rmtree()
                    self.log(f"  removed {d}, the records published before {published['version']}")
                    continue
                raise DataError(f"{d} holds an unfinished prepare of other inputs into {self.out}; wait for it to "
                                f"finish, or if none runs remove it (gsutil -m rm -r {d}) and run this again")
            try:
                with flock(self._version_lock(d.name), fcntl.LOCK_EX | fcntl.LOCK_NB):
                    size = dir_bytes(str(d))
                    shutil.rmtree(str(d))
                    os.unlink(self._version_lock(d.name))
                    self.log(f"  removed {d} ({size_text(size)}), left by an earlier prepare")
            except BlockingIOError:
                raise DataError(f"another prepare is writing other records into {self.out} ({d.name}); wait "
                                "for it to finish, then prepare into another --out") from None

    def _status(self) -> None:
        """Whether this version is published and this shard recorded (files present, sizes as recorded)."""
        published = self.manifest()
        self.published = published is not None and published.get("version") == self.version
        claim = records.claim_file(self.root, self.version, self.shard, self.shards)
        if self.published or claim.exists():
            entries = records.read_json(claim) if claim.exists() else \
                {s: published["files"][s][self.shard] for s in records.SPLITS}
            for split in records.SPLITS:
                f = records.shard_file(self.root, self.version, split, self.shard, self.shards)
                if not f.exists() or f.stat().length != entries[split]["bytes"]:
                    if self.published:
                        raise DataError(f"{f} does not match {self.out}/{records.MANIFEST} (damaged after it was "
                                        f"prepared); remove {self.out} and prepare again")
                    return  # an unfinished shard: written again
            self.todo = False

    # ------------------------------------------------------------------ commit and publish

    def commit(self, stats: dict) -> None:
        """Move the staged <split>.array_record files into the version, then record them (sizes, sha256)."""
        entries = {}
        for split in records.SPLITS:
            src = os.path.join(self.stage, f"{split}.array_record")
            size, sha = file_sha256(src)
            entries[split] = dict({k: int(stats[split][k]) for k in ("rows", "tokens", "documents")}, bytes=size,
                                  sha256=sha)
            dest = records.shard_file(self.root, self.version, split, self.shard, self.shards)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if self.local:
                os.replace(src, str(dest))
            else:
                epath.Path(src).copy(dest, overwrite=True)
                if dest.stat().length != size:
                    raise DataError(f"{dest} holds {dest.stat().length} bytes after the copy, not {size}; check "
                                    "the bucket and run this again")
            self._pause(split)
        _write_json(records.claim_file(self.root, self.version, self.shard, self.shards), entries)
        self.todo = False

    def publish(self, inputs: str) -> bool:
        """Write dataset.json when every shard of the version is recorded; True once published."""
        if self.published:
            return True
        claims = [records.claim_file(self.root, self.version, i, self.shards) for i in range(self.shards)]
        if not all(c.exists() for c in claims):
            return False
        manifest = dict(self.recipe, version=self.version, inputs=inputs, files={s: [] for s in records.SPLITS})
        for c in claims:
            entry = records.read_json(c)
            for s in records.SPLITS:
                manifest["files"][s].append(entry[s])
        manifest["fingerprints"] = {s: records.fingerprint(manifest, s) for s in records.SPLITS}
        lock = flock(os.path.join(self.out, LOCK), fcntl.LOCK_EX) if self.local else contextlib.nullcontext()
        with lock:
            published = self.manifest()
            if published is not None and {k: published.get(k) for k in records.RECIPE} != self.recipe:
                raise DataError(f"another prepare published other records into {self.out} while this one ran; "
                                "prepare into another --out")
            if published is not None and published.get("version") != self.version:
                manifest["previous"] = published.get("version")
            _write_json(self.root / records.MANIFEST, manifest)
        self.published = True
        return True

    def superseded(self) -> list[tuple[str, int]]:
        """(path, bytes) of the local versions other than this one (removed by the next prepare)."""
        if not self.local or not self.root.is_dir():
            return []
        return [(str(d), dir_bytes(str(d))) for d in sorted(self.root.glob("v-*")) if d.name != self.version]

    def __exit__(self, exc_type, exc, tb):
        if self.stage:
            shutil.rmtree(self.stage, ignore_errors=True)
        self._locks.close()  # releases the locks (a removed staging dir's with it)
        if exc_type is not None and self.local:
            self._drop_empty_version()
        return False

    def _drop_empty_version(self) -> None:
        """After a failure: remove this version if no shard of it is recorded and nobody else writes it,
        and the directory itself if this process made it and nothing else is left in it."""
        d = self.root / self.version
        if self.published or any(d.glob("shard-*.json")):
            return
        with contextlib.suppress(BlockingIOError, FileNotFoundError):
            with flock(self._version_lock(self.version), fcntl.LOCK_EX | fcntl.LOCK_NB):
                shutil.rmtree(str(d), ignore_errors=True)
                os.unlink(self._version_lock(self.version))
        if not self._created:
            return
        with contextlib.suppress(BlockingIOError, FileNotFoundError, OSError):
            with flock(os.path.join(self.out, LOCK), fcntl.LOCK_EX | fcntl.LOCK_NB):
                if os.listdir(self.out) == [LOCK]:
                    os.unlink(os.path.join(self.out, LOCK))
                    os.rmdir(self.out)
