"""Storage failures, told apart and explained in one line each: full disk, quota, file-size limit,
read-only mount, permissions.

    line = storage.storage_line(exc, workdir, command="train")   # None: not a storage failure

A failure is recognised anywhere in the exception chain, by errno (OSError) or by TensorStore's
text (`No space left on device`, `os_error_code=28`). The line names the file (or the directory),
the fix for that errno, and what re-running the command then does (`RERUN`, by command).
"""

from __future__ import annotations

import errno
import re

from linscale_jax.errors import chain

# errno -> (TensorStore / strerror text, problem, fix); {where}: " DIR" or " under DIR", {path}: the file
_STORAGE = {
    errno.ENOSPC: ("No space left on device", "no space left on device while writing{where}",
                   "free disk space (or move the workdir)"),
    errno.EDQUOT: ("Disk quota exceeded", "disk quota exceeded while writing{where}",
                   "free space within your quota or have it raised (quota -s shows it)"),
    errno.EFBIG: ("File too large", "a file grew past the largest file allowed ({limit}) while "
                  "writing{where}", "raise the limit (ulimit -f unlimited) or move the workdir to a "
                  "file system that allows larger files"),
    errno.EROFS: ("Read-only file system", "{path} is on a read-only file system",
                  "remount it read-write or pass a writable directory (--workdir; eval: --out)"),
    errno.EACCES: ("Permission denied", "permission denied writing {path}",
                   "make it writable for this user (chown/chmod) or pass another directory"),
}
_STORAGE[errno.EPERM] = ("Operation not permitted",) + _STORAGE[errno.EACCES][1:]

# what re-running the command does once the fix is made (the end of the line), by command
RERUN = {
    "train": "then re-run the same command: it resumes from the last complete checkpoint.",
    "study": "then re-run the same command: it resumes from the last complete checkpoint.",
    "eval": "then re-run the same command: it skips the rows already written.",
}
RERUN_OTHER = "then re-run the same command."

_WRITING = re.compile(r"(?:writing|opening|creating|path) ['\"]?(/[^\s;'\",]+)")


def storage_errno(e: BaseException) -> tuple[int, str | None] | None:
    """(errno, path or None) of the first storage failure in e's chain, or None."""
    for x in chain(e):
        if isinstance(x, OSError) and x.errno in _STORAGE:
            return x.errno, x.filename
        text = str(x)
        for code, (needle, *_) in _STORAGE.items():
            if needle in text or f"os_error_code='{code}'" in text or f"os_error_code={code}" in text:
                m = _WRITING.search(text)
                return code, m.group(1) if m else None
    return None


def disk_full(e: BaseException) -> bool:
    """A full disk or quota anywhere in e's chain."""
    return (storage_errno(e) or (None,))[0] in (errno.ENOSPC, errno.EDQUOT)


def _file_size_limit() -> str:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return "the file system's maximum"
    return "the file system's maximum" if soft == resource.RLIM_INFINITY else \
        f"ulimit -f is {soft // 1024} blocks of 1 KiB"


def storage_line(e: BaseException, workdir=None, command: str = "train") -> str | None:
    """The one line for a storage failure in e's chain (None when there is none)."""
    found = storage_errno(e)
    if found is None:
        return None
    code, path = found
    _, problem, fix = _STORAGE[code]
    where = f" {path}" if path else f" under {workdir}" if workdir else ""
    problem = problem.format(where=where, path=path or workdir or "the output directory",
                             limit=_file_size_limit() if code == errno.EFBIG else "")
    return f"{problem}; {fix}, {RERUN.get(command, RERUN_OTHER)}"
