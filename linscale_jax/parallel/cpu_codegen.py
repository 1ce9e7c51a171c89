"""XLA:CPU's own fused loops for every fusion: YNNPACK's fusions off.

XLA:CPU hands some fusions (dots, elementwise chains, reductions) to YNNPACK. On the miniature
ladder's train steps those are slower than XLA's own loops: a reduction over non-minor axes in
cosformer2's LRPE gradient ([batch, seq, heads, 2, head_dim] -> [heads, head_dim]) takes 3.5 ms
of a 9.9 ms step as two YNNPACK fusions on a 2-core AMD EPYC VM. With them off the step of every
arch is 1.04-1.50x faster there (`python bench/xla_fusions.py`; docs/results.md, "CPU train-step
choices"). On that processor YNNPACK's transpose also crashes (SIGSEGV) in the gradient of the
chunked linear attention at odd chunk sizes. The two settings compile different code, so a run's
last bits differ between them.

    FLAG                 the XLA_FLAGS entry: no YNNPACK fusion type
    use_xla_fusions()    add FLAG to $XLA_FLAGS unless it already names the option

An XLA_FLAGS that names the option keeps its value (`--xla_cpu_experimental_ynn_fusion_type=+dot`
is XLA's default set). XLA reads its flags when the first backend starts: entry points call
use_xla_fusions() before that, and study workers and multi-process runs inherit the variable.
"""

from __future__ import annotations

import os

OPTION = "xla_cpu_experimental_ynn_fusion_type"
FLAG = f"--{OPTION}="


def use_xla_fusions(environ=os.environ) -> None:
    """$XLA_FLAGS gains FLAG unless it already names the option (the caller's choice wins)."""
    flags = environ.get("XLA_FLAGS", "")
    if OPTION not in flags:
        environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
