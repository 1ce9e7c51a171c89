"""linscale_jax.parallel.host_memory: the one re-exec with glibc's huge-page malloc, and its effect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from linscale_jax.parallel import host_memory

ROOT = Path(__file__).resolve().parents[1]

# prints one line per execution, so a re-exec shows as two lines
_SCRIPT = """
import json, os, sys
print(json.dumps([os.environ.get("GLIBC_TUNABLES"), sys.orig_argv[-2:]]), flush=True)
from linscale_jax.parallel import host_memory
host_memory.use_huge_pages()
"""

needs_thp = pytest.mark.skipif(
    not host_memory.wanted({}), reason="needs glibc >= 2.35 and transparent huge pages on")


def _child(code, tunables, *args):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_wanted_respects_an_explicit_setting():
    assert not host_memory.wanted({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})
    assert not host_memory.wanted({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"})
    version = host_memory.glibc_version()
    assert version is None or (len(version) == 2 and version[0] >= 2)
    assert host_memory.transparent_huge_pages() in (None, "always", "madvise", "never")


@needs_thp
def test_reexecutes_once_keeping_argv_and_other_tunables():
    runs = _child(_SCRIPT, None, "--a=1", "b")
    assert runs == [[None, ["--a=1", "b"]], ["glibc.malloc.hugetlb=1", ["--a=1", "b"]]]
    runs = _child(_SCRIPT, "glibc.malloc.arena_max=4", "x", "y")
    assert [r[0] for r in runs] == ["glibc.malloc.arena_max=4",
                                    "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1"]


def test_an_explicit_setting_is_never_overridden():
    assert _child(_SCRIPT, "glibc.malloc.hugetlb=0", "p", "q") == [["glibc.malloc.hugetlb=0", ["p", "q"]]]


_FAULTS = """
import ctypes, json, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 256 * 2**20
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):  # a fresh 256 MiB malloc each time, as XLA:CPU's per-call temporaries
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    libc.free(p)
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


@needs_thp
def test_huge_pages_cut_the_faults_of_large_fresh_blocks():
    (small,) = _child(_FAULTS, "glibc.malloc.hugetlb=0")
    assert small > 4 * 60_000  # 4 x 65,536 pages of 4 KiB
    # The kernel falls back to 4 KiB pages while no free 2 MiB block is at hand (memory fragmented by
    # the other test worker): the fewest faults of three children measure what huge pages allow.
    tries = []
    for _ in range(3):
        tries += _child(_FAULTS, "glibc.malloc.hugetlb=1")
        if min(tries) < small / 20:
            break
    assert min(tries) < small / 20, (small, tries)
