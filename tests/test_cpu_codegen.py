"""linscale_jax.parallel.cpu_codegen: XLA:CPU's own fusions, YNNPACK's off, and the caller's choice kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from linscale_jax.parallel import cpu_codegen

ROOT = Path(__file__).resolve().parents[1]

# the shapes of cosformer2's LRPE gradient: a reduction over non-minor axes, and a dot
_SCRIPT = """
import json, re, sys
from linscale_jax.parallel import cpu_codegen
cpu_codegen.use_xla_fusions()
import os, jax, jax.numpy as jnp
def f(a, b, w):
    return (a * b).sum(axis=(0, 1)), jnp.tanh(a.reshape(-1, 16) @ w)
a = jnp.ones((4, 128, 2, 16)); w = jnp.ones((16, 16))
text = jax.jit(f).lower(a, a, w).compile().as_text()
print(json.dumps([os.environ["XLA_FLAGS"], len(re.findall("__ynn_fusion", text))]))
"""


def _child(flags: str):
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return json.loads(out.splitlines()[-1])


def _without_option(flags: str) -> str:
    return " ".join(f for f in flags.split() if cpu_codegen.OPTION not in f)


def test_adds_the_flag_and_keeps_the_callers_choice():
    env = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    cpu_codegen.use_xla_fusions(env)
    assert env["XLA_FLAGS"] == f"--xla_cpu_multi_thread_eigen=false {cpu_codegen.FLAG}"
    cpu_codegen.use_xla_fusions(env)  # once only
    assert env["XLA_FLAGS"].count(cpu_codegen.OPTION) == 1
    empty = {}
    cpu_codegen.use_xla_fusions(empty)
    assert empty == {"XLA_FLAGS": cpu_codegen.FLAG}
    mine = {"XLA_FLAGS": f"--{cpu_codegen.OPTION}=+dot"}
    cpu_codegen.use_xla_fusions(mine)
    assert mine == {"XLA_FLAGS": f"--{cpu_codegen.OPTION}=+dot"}


def test_compiled_programs_have_no_ynnpack_fusion_and_xlas_default_has_some():
    base = _without_option(os.environ.get("XLA_FLAGS", ""))
    flags, ynn = _child(base)
    assert cpu_codegen.FLAG in flags.split() and ynn == 0
    flags, ynn = _child(f"{base} --{cpu_codegen.OPTION}=+dot".strip())  # XLA's default set
    assert cpu_codegen.FLAG not in flags.split() and ynn > 0
