"""Per-backend chunk lengths of the delta rule: the one place the defaults live.

`default_chunk_size(impl)` is what `delta_rule(..., chunk_size=None)` uses: xla -> XLA_CHUNK of the
backend, pallas -> the TPU generation's blocks (DELTA_BLOCKS), reference -> unused (1).
"""

from __future__ import annotations

import jax

# Chunk length of the xla form per backend.
XLA_CHUNK = {"tpu": 64, "gpu": 64, "cpu": 32}


def default_chunk_size(impl: str, backend: str | None = None) -> int:
    backend = backend or jax.default_backend()
    if impl == "xla":
        return XLA_CHUNK.get(backend, XLA_CHUNK["cpu"])
    return 1
