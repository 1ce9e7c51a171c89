"""One study per workdir: DIR/study.lock, held by the study's driver while it trains, evaluates and
joins (linscale_jax.run.lock's flock, holder and heartbeat; released by the kernel when the driver
dies, so a kill -9 leaves nothing behind on a local disk).

    with lock.hold_study(workdir, shard_spec=None):   # StudyLockedError naming the holder
        experiments.run(study, workdir, options)

A second study on the same workdir is refused before it writes anything, in one line naming the
first one's pid and host; the first is unharmed. A study that fails at its start in a workdir it
created (a bad input) leaves none behind. Shards of one study (--shard=i/n, one invocation
per host) train disjoint runs at once, so each shard holds its own lock (study-shard-<i>of<n>.lock).
In a multi-process launch process 0 holds it. The runs keep their own train.lock (one writer per
run workdir), which the study's workers and Ray tasks take as any trainer does.
"""

from __future__ import annotations

import contextlib
import os

from linscale_jax.errors import Refusal
from linscale_jax.run import lock as run_lock

STUDY_LOCK = "study.lock"


class StudyLockedError(Refusal, RuntimeError):
    """Another study holds the workdir."""


def lock_name(shard_spec: str | None = None) -> str:
    """DIR/study.lock, or a shard's own (study-shard-<i>of<n>.lock)."""
    try:
        i, n = (int(x) for x in str(shard_spec or "0/1").split("/"))
    except ValueError:  # a bad --shard: the study's own check reports it
        return STUDY_LOCK
    return STUDY_LOCK if n <= 1 else f"study-shard-{i}of{n}.lock"


def _refusal(workdir, h: dict) -> StudyLockedError:
    return StudyLockedError(
        f"{workdir} is in use by another study: pid {h.get('pid')} on {h.get('host')} (since "
        f"{h.get('started')}); wait for it to finish or stop it (kill {h.get('pid')} on {h.get('host')}: "
        "its runs save and a re-run resumes them), or use another --workdir")


@contextlib.contextmanager
def hold_study(workdir: str, shard_spec: str | None = None, enabled: bool | None = None):
    """Hold the study's lock on `workdir` (created if missing) for the block; enabled=None: only
    in process 0 of a multi-process launch."""
    if enabled is None:
        from linscale_jax.parallel import distributed

        enabled = distributed.is_primary()
    if not enabled:
        yield None
        return
    from etils import epath

    path = epath.Path(workdir)
    made = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    try:
        with run_lock.hold(workdir, name=lock_name(shard_spec), refusal=_refusal) as me:
            yield me
    except BaseException:
        if made and "://" not in str(workdir):  # a study refused at its start leaves no workdir
            with contextlib.suppress(OSError):  # (only an empty one goes: os.rmdir)
                os.rmdir(workdir)
        raise
