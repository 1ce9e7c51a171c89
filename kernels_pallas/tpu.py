"""TPU generations: the chip figures the kernels' blocks and the roofline read, and the device kinds
that name them.

    generation(device_kind) -> TpuGeneration | None      (None: not a known TPU, e.g. "cpu")
    GENERATIONS["v5p"].peak_bf16_flops, .hbm_bytes_per_s, .vmem_bytes, .mxu, .tensorcores

Figures are per chip, except VMEM (per TensorCore); `GENERATIONS` below is the one table of them
(MFU peaks, kernel blocks and the roofline read it). Sources: peak bf16 FLOP/s, HBM bandwidth and
TensorCores per chip from the Cloud TPU system architecture pages
(https://cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e); VMEM per TensorCore, MXU width and the
device-kind strings from JAX's Pallas TPU chip table
(https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/mosaic/tpu_info.py).
"""

from __future__ import annotations

import dataclasses

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class TpuGeneration:
    name: str
    device_kinds: tuple  # jax Device.device_kind strings
    mxu: int  # systolic array side (mxu x mxu)
    vmem_bytes: int  # per TensorCore
    tensorcores: int  # per chip (2: megacore, the "parallel" grid axes are split between them)
    peak_bf16_flops: float  # per chip, FLOP/s
    hbm_bytes_per_s: float  # per chip

    @property
    def ridge(self) -> float:
        """FLOPs per HBM byte at which a kernel turns from memory- to compute-bound."""
        return self.peak_bf16_flops / self.hbm_bytes_per_s


GENERATIONS = {
    g.name: g for g in (
        TpuGeneration("v4", ("TPU v4",), 128, 16 * MiB, 2, 275e12, 1200e9),
        TpuGeneration("v5e", ("TPU v5 lite", "TPU v5e"), 128, 128 * MiB, 1, 197e12, 819e9),
        TpuGeneration("v5p", ("TPU v5p", "TPU v5"), 128, 64 * MiB, 2, 459e12, 2765e9),
        TpuGeneration("v6e", ("TPU v6 lite", "TPU v6e"), 256, 128 * MiB, 1, 918e12, 1640e9),
    )
}


def generation(device_kind: str | None) -> TpuGeneration | None:
    """The generation a jax device kind names ("TPU v5 lite" -> v5e), or None for anything else."""
    kind = (device_kind or "").strip().lower()
    for g in GENERATIONS.values():
        if kind in (k.lower() for k in g.device_kinds):
            return g
    return None


def by_name(name: str) -> TpuGeneration:
    """GENERATIONS[name] with a clear error naming the choices."""
    if name not in GENERATIONS:
        raise ValueError(f"unknown TPU generation {name!r}; choose one of {sorted(GENERATIONS)}.")
    return GENERATIONS[name]
