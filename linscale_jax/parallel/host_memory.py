"""Huge pages for XLA:CPU's per-step buffers: an entry point re-executes itself once with glibc's
`glibc.malloc.hugetlb=1` tunable.

XLA:CPU allocates an executable's temporaries as one block per call (hundreds of MB at d256),
which glibc maps fresh and unmaps after every call; with 4 KiB pages each step then faults in
every page anew. With the tunable set, glibc asks for transparent huge pages
(`madvise(MADV_HUGEPAGE)`) on the blocks it maps. Fault counts and step times:
docs/results.md, "CPU train-step choices" (`python bench/huge_pages.py` times both settings).
The tunable needs glibc 2.35 or later and THP in `madvise` or `always` mode; glibc reads tunables
only when a process starts, hence the re-exec. Children (study workers, multi-process runs)
inherit the variable.

Nothing happens when:
- GLIBC_TUNABLES already names `glibc.malloc.hugetlb` (set it to 0 to opt out);
- the C library is not glibc 2.35+;
- THP is off (`never`).
Library imports never re-execute: only a program's `__main__` calls `use_huge_pages()`.
"""

from __future__ import annotations

import os
import sys

TUNABLE = "glibc.malloc.hugetlb"
_THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def glibc_version() -> tuple[int, int] | None:
    """(major, minor) of the running glibc, or None for another C library / platform."""
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    except (AttributeError, ValueError, OSError):
        return None
    if name != "glibc":
        return None
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def transparent_huge_pages() -> str | None:
    """The kernel's THP mode ('always', 'madvise' or 'never'), or None when unknown."""
    try:
        text = open(_THP).read()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")] if "[" in text else None


def wanted(environ=os.environ) -> bool:
    """Whether this process should re-execute itself with the tunable (see the module doc)."""
    if TUNABLE in environ.get("GLIBC_TUNABLES", ""):
        return False
    version = glibc_version()
    return version is not None and version >= (2, 35) and transparent_huge_pages() in ("always", "madvise")


def use_huge_pages() -> None:
    """Re-execute the running command (`sys.orig_argv`, same interpreter and environment) with
    `glibc.malloc.hugetlb=1` added to GLIBC_TUNABLES, or return when `wanted()` is False. Call it
    first thing in a program's `if __name__ == "__main__":`, before jax is imported."""
    if not wanted():
        return
    tunables = ":".join(t for t in (os.environ.get("GLIBC_TUNABLES"), f"{TUNABLE}=1") if t)
    env = dict(os.environ, GLIBC_TUNABLES=tunables)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as e:  # keep running with 4 KiB pages: slower, never wrong
        print(f"linscale_jax.parallel.host_memory: could not re-execute with {TUNABLE}=1 ({e}); "
              "continuing with glibc's default malloc", file=sys.stderr)
