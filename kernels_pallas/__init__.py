"""Kernels for linear attention: pure-JAX references, chunked XLA forms and Pallas kernels."""

from kernels_pallas.linear_attention.api import DecayKind, linear_attention
from kernels_pallas.linear_attention.config import default_chunk_size

__all__ = ["linear_attention", "DecayKind", "default_chunk_size"]
