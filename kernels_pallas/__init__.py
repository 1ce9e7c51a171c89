"""Kernels for linear attention and the delta rule: pure-JAX references, chunked XLA forms and
Pallas kernels."""

from kernels_pallas.delta_rule.api import delta_rule, delta_rule_step
from kernels_pallas.linear_attention.api import DecayKind, linear_attention
from kernels_pallas.linear_attention.config import default_chunk_size

__all__ = ["linear_attention", "DecayKind", "default_chunk_size", "delta_rule", "delta_rule_step"]
