"""Before a trainer touches a workdir: lock it, check what it holds, then repair what is broken.

    with integrity.guard(config, workdir, init_from, resume_step, allow_config_change) as g:
        ... restore the newest checkpoint, train, save with metadata extra=g.metadata ...

Order (all refusals happen before anything in the workdir changes, and the lock file is removed
again, so a refused command leaves the workdir byte-identical):
  1. claim the workdir: create it if missing, take its lock (linscale_jax.run.lock; a second
     trainer is refused naming the holder); a failure in a workdir this process created, before
     its first checkpoint, removes that workdir again
  2. scan the step dirs read-only (linscale_jax.run.checksums: empty, unreadable, checksum mismatch;
     each process verifies its share of the newest checkpoint and all agree)
  3. refuse --init_from when the workdir already has checkpoints (re-running resumes)
  4. refuse --resume_step=N when N is not a usable checkpoint (0 starts over)
  5. compare the config with the checkpoint to resume (linscale_jax.run.identity)
  6. move unusable step dirs to checkpoints_corrupt/ (one line each) and, with --resume_step=N, the
     later checkpoints to checkpoints_discarded/<time>/; without it, a resume starts from the newest
     checkpoint with the training state, and the eval-only ones after it (checkpoint.state_steps;
     the resumed run writes them again, bit for bit) go to checkpoints_discarded/<time>/ as well
In multi-process runs process 0 locks and repairs; every process checks; all wait for process 0.
"""

from __future__ import annotations

import contextlib
import time
import types

from etils import epath

import jax

from linscale_jax import contract
from linscale_jax.run import checksums
from linscale_jax.run import identity
from linscale_jax.run import signals
from linscale_jax.run import lock as workdir_lock
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.errors import Refusal


class RunRefusedError(Refusal, ValueError):
    """A command that would mix or lose a run's data; nothing in the workdir was changed."""


def _sync(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _share():
    """This process's share of checksum verification, and the agreement over processes."""
    from linscale_jax.parallel import distributed

    return (jax.process_index(), jax.process_count()), distributed.first_problem


def _check(config, workdir: epath.Path, init_from, resume_step, allow_change):
    share, agree = _share()
    plan = checksums.scan(workdir, share, agree)
    usable = sorted(set(checksums.step_dirs(workdir)) - set(plan.bad))
    if init_from and usable:
        raise RunRefusedError(
            f"--init_from={init_from}: {workdir} already has checkpoints (steps {usable[0]}.."
            f"{usable[-1]}); re-run without --init_from to resume this run, or pass a new "
            "--workdir to start from those parameters.")
    target = plan.good
    if resume_step is not None and resume_step != 0:
        if resume_step not in usable:
            raise RunRefusedError(
                f"--resume_step={resume_step}: no usable checkpoint at that step in "
                f"{ckpt.ckpt_dir(workdir)} (usable steps: {usable or 'none'}); pick one of those, "
                "or 0 to start over.")
        problem = agree(checksums.verify(ckpt.ckpt_dir(workdir) / str(resume_step), share))
        if problem:
            raise RunRefusedError(f"--resume_step={resume_step}: that checkpoint is unusable "
                                  f"({problem}); pick an earlier step.")
        target = resume_step
    elif resume_step == 0:
        target = None
    elif target is not None and not ckpt.holds_state(ckpt.load_metadata(workdir, target)):
        held = [s for s in usable if s < target and ckpt.holds_state(ckpt.load_metadata(workdir, s))]
        target = held[-1] if held else None  # the eval-only ones after it are moved aside (_repair)
    meta, accepted = None, {}
    if target is not None:
        meta = ckpt.load_metadata(workdir, target)
        accepted = identity.check_resume(meta.get("config", {}), config, workdir, target,
                                             allow_change)
    return plan, target, meta, accepted


def _repair(workdir: epath.Path, plan, target, resume_step) -> None:
    checksums.apply(workdir, plan)
    later = sorted(s for s in checksums.step_dirs(workdir) if target is None or s > target)
    if not later or (resume_step is None and target == plan.good):
        return
    dst = epath.Path(workdir) / contract.CHECKPOINTS_DISCARDED / time.strftime("%Y%m%d-%H%M%S")
    dst.mkdir(parents=True, exist_ok=True)
    for s in later:
        (ckpt.ckpt_dir(workdir) / str(s)).rename(dst / str(s))
    why = (f"--resume_step={resume_step}" if resume_step is not None else
           f"resuming from {'step ' + str(target) if target else 'the start'}, the newest checkpoint "
           "with the training state (the later ones are eval-only)")
    print(f"{why}: moved checkpoints {later} to {dst}.", flush=True)


@contextlib.contextmanager
def guard(config, workdir, init_from=None, resume_step=None, allow_change=False):
    workdir = ckpt.as_path(workdir)
    lead = jax.process_index() == 0
    with workdir_lock.claim(workdir, enabled=lead):
        with signals.postponed():  # a repair cut short would leave checkpoints half moved
            plan, target, meta, accepted = _check(config, workdir, init_from, resume_step,
                                                  allow_change)
            if lead:
                _repair(workdir, plan, target, resume_step)
            _sync("linscale_integrity_repaired")
        if accepted:
            print(f"--allow_config_change: continuing {workdir} with "
                  f"{identity._fmt(accepted)} (recorded in checkpoint metadata).", flush=True)
        yield types.SimpleNamespace(metadata=identity.record(meta, accepted, target or 0),
                                    target=target)
