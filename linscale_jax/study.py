"""Alias kept for old commands: `python -m linscale_jax.study ARGS` runs `python -m study ARGS`.

The study orchestrator sits above eval and fit (the layers are kernels_pallas <- linscale_jax <-
eval, fit <- study), so it lives in the top-level `study` package; this alias replaces the process
and imports nothing, which keeps the layering one-way.
"""

import os
import sys

if __name__ == "__main__":
    os.execv(sys.executable, [sys.executable, "-m", "study", *sys.argv[1:]])
