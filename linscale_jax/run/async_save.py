"""An asynchronous checkpoint write that fails is reported at the step it failed, not one save later.

    pending = async_save.Pending(mngr, workdir)
    pending.started(step)        # after ckpt.save(mngr, step, ...)
    pending.check(step)          # every training step: raises SaveFailedError once the write failed
    pending.wait(step)           # before the next save: the same, waiting for the write

Orbax raises a background write's error only at the next save or wait; `check` collects it at the
first step after the write ended (never waiting on a write in progress), and names the checkpoint with the storage line (linscale_jax.run.storage:
full disk, quota, file size limit, read-only file system, permissions) and its fix.
"""

from __future__ import annotations

from linscale_jax.run import storage
from linscale_jax.errors import UserError


class SaveFailedError(UserError, OSError):
    """A checkpoint could not be written (the message names it and the fix)."""


class Pending:
    def __init__(self, mngr, workdir):
        self.mngr, self.workdir, self.step = mngr, workdir, None

    def started(self, step: int) -> None:
        self.step = int(step)

    def check(self, now: int) -> None:
        if self.step is None or self.mngr.is_saving_in_progress():
            return
        step, self.step = self.step, None
        try:
            self.mngr.wait_until_finished()  # finished: returns at once, raising the write's error
        except Exception as e:  # noqa: BLE001 - whatever the background write raised
            raise failed(e, step, now, self.workdir) from e


    def wait(self, now: int) -> None:
        """Wait for the write under way (before the next save), naming it if it failed."""
        step, self.step = self.step, None
        try:
            self.mngr.wait_until_finished()
        except Exception as e:  # noqa: BLE001
            raise failed(e, now if step is None else step, now, self.workdir) from e


def failed(e: BaseException, step: int, now: int, workdir) -> SaveFailedError:
    why = storage.storage_line(e, workdir) or (
        f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}; the log "
        "has the traceback, then re-run the same command: it resumes from the last complete "
        "checkpoint.")
    return SaveFailedError(f"checkpoint {step} could not be written (seen at step {now}): {why}")
