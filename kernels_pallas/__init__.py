"""Kernels for linear attention: pure-JAX references, chunked XLA forms and Pallas kernels."""

from kernels_pallas.linear_attention.api import (
    RESET_LOG_DECAY,
    linear_attention,
    segment_reset_log_decay,
)

__all__ = ["linear_attention", "RESET_LOG_DECAY", "segment_reset_log_decay"]
