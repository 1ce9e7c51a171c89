"""Per-backend block sizes of linear attention: the one place the defaults live.

`default_chunk_size(impl, key_dim=...)` is what `linear_attention(..., chunk_size=None)` uses (the
models pass None): Pallas -> DEFAULTS[backend].chunk_size (TPU 128), xla -> the key head dim clamped
to [XLA_CHUNK, XLA_CHUNK_MAX][backend]; the xla form's outer block sweep length is XLA_BLOCK[backend];
whether it recomputes the data-decay block terms in the backward is XLA_REMAT_DATA_DECAY[backend].

Pallas kernels: chunks of `chunk_size` tokens (one grid step each), the data decay's sub-chunks of
`sub_chunk` rows, the grid order and the scoped VMEM limit per TPU generation (`TPU_BLOCKS`, chosen
from jax's device kind by `default_blocks`; chip figures in kernels_pallas/tpu.py). `check_vmem` and
`check_tiling` hold a choice to the core's VMEM and to TPU tiling (head dims multiples of 128, chunks
of 8, or 16 for bf16 inputs). Why these blocks: docs/models.md, "The Pallas kernels"; the table per
generation: docs/results.md, "Blocks per TPU generation".
An explicit `blocks=` (or `chunk_size=`) overrides the table; CPU (interpret mode) and GPU keep
`DEFAULTS`; a TPU whose device kind is not in the table gets DEFAULTS["tpu"].
"""

from __future__ import annotations

import dataclasses

import jax

from kernels_pallas import tpu

_LANE = 128
GRID_ORDERS = ("bhn", "hbn")  # batch, heads, chunks; the chunk axis (sequential) is always last


@dataclasses.dataclass(frozen=True)
class LinearAttentionBlocks:
    """chunk_size: tokens per grid step; sub_chunk: diagonal sub-block of the data-dependent decay;
    grid_order: "bhn" (grid batch, heads, chunks) or "hbn"; vmem_limit_bytes: Mosaic's scoped
    VMEM limit (None: the compiler's default)."""

    chunk_size: int = 64
    sub_chunk: int = 16
    grid_order: str = "bhn"
    vmem_limit_bytes: int | None = None

    def __post_init__(self):
        if self.chunk_size < 1 or self.sub_chunk < 1:
            raise ValueError(f"block sizes must be positive, got {self}.")
        if self.grid_order not in GRID_ORDERS:
            raise ValueError(f"grid_order={self.grid_order!r}: choose one of {GRID_ORDERS}.")
        if self.chunk_size % self.sub_chunk:
            raise ValueError(
                f"chunk_size={self.chunk_size} must be a multiple of sub_chunk={self.sub_chunk}."
            )

    def with_chunk_size(self, chunk_size: int) -> "LinearAttentionBlocks":
        """The same defaults with another chunk size (sub_chunk shrunk to divide it if needed)."""
        sub = self.sub_chunk
        while chunk_size % sub:
            sub //= 2
        return dataclasses.replace(self, chunk_size=chunk_size, sub_chunk=max(sub, 1))


def _tpu_blocks(gen: tpu.TpuGeneration, chunk: int, sub: int) -> LinearAttentionBlocks:
    return LinearAttentionBlocks(chunk_size=chunk, sub_chunk=sub,
                                 grid_order="hbn" if gen.tensorcores > 1 else "bhn",
                                 vmem_limit_bytes=gen.vmem_bytes * 3 // 4)


TPU_BLOCKS = {
    "v4": _tpu_blocks(tpu.GENERATIONS["v4"], 128, 16),
    "v5e": _tpu_blocks(tpu.GENERATIONS["v5e"], 128, 16),
    "v5p": _tpu_blocks(tpu.GENERATIONS["v5p"], 128, 16),
    "v6e": _tpu_blocks(tpu.GENERATIONS["v6e"], 256, 32),
}

DEFAULTS = {
    "tpu": LinearAttentionBlocks(chunk_size=128, sub_chunk=16),
    "gpu": LinearAttentionBlocks(chunk_size=64, sub_chunk=16),
    "cpu": LinearAttentionBlocks(chunk_size=64, sub_chunk=16),  # Pallas interpret mode
}


# Chunk length of the chunked XLA form (impl="xla") per backend. Per token and head the chunk
# costs 2c(k + v) in its within-chunk products against 4kv for the state, so the best chunk grows
# with the key head dim k: the chunk is k rounded up to a power of two, clamped to
# [XLA_CHUNK, XLA_CHUNK_MAX] of the backend (fixed on TPU and GPU). CPU [16, 64]: at k = 8
# 16 beat 32 and 64 in the d256 train step of every linear model, as the small
# [c, k] x [k, c] products run far below the machine's peak; at k = 32 / 64 / 128,
# `bench/linear_attention.py --chunk-size` sweeps put the best at 32 / 32-64 / 64, up to 2x faster
# than 16 (docs/results.md, "Linear attention speed").
XLA_CHUNK = {"tpu": 128, "gpu": 64, "cpu": 16}
XLA_CHUNK_MAX = {"tpu": 128, "gpu": 64, "cpu": 64}


# Tokens per step of the xla form's outer sequential sweep over blocks (None: the whole sequence
# at once). On CPU a block keeps one step's arrays in cache, so time grows linearly with length.
XLA_BLOCK = {"tpu": None, "gpu": None, "cpu": 512}


# Whether the xla form recomputes the data-dependent decay's per-level scaled q / k in the backward
# (`jax.checkpoint`) instead of storing them. CPU: stored (memory is plentiful next to the CPU's
# sizes, and the recompute costs time: docs/results.md, "CPU train-step choices").
XLA_REMAT_DATA_DECAY = {"tpu": True, "gpu": True, "cpu": False}


def xla_remat_data_decay(backend: str | None = None) -> bool:
    """Whether the xla form's data-decay block terms are rematerialized in the backward."""
    return XLA_REMAT_DATA_DECAY.get(backend or jax.default_backend(), XLA_REMAT_DATA_DECAY["cpu"])


def xla_block_len(chunk_size: int, backend: str | None = None) -> int | None:
    """Block length of the xla form (a multiple of chunk_size), or None for no blocking."""
    block = XLA_BLOCK.get(backend or jax.default_backend(), XLA_BLOCK["cpu"])
    if block is None:
        return None
    return max(1, block // chunk_size) * chunk_size


def default_chunk_size(impl: str, backend: str | None = None, key_dim: int | None = None) -> int:
    """The chunk length used when linear_attention gets chunk_size=None (the one per-backend
    place): Pallas -> its block default, xla -> the key head dim `key_dim` rounded up to a power
    of two and clamped to [XLA_CHUNK, XLA_CHUNK_MAX] of the backend (XLA_CHUNK without key_dim),
    reference -> unused (1)."""
    backend = backend or jax.default_backend()
    if impl == "pallas":
        return default_blocks(backend).chunk_size
    if impl == "xla":
        return xla_chunk(XLA_CHUNK, XLA_CHUNK_MAX, backend, key_dim)
    return 1


def xla_chunk(low: dict, high: dict, backend: str, key_dim: int | None) -> int:
    """The xla form's chunk: the key head dim rounded up to a power of two, clamped to
    [low, high][backend] (low[backend] without key_dim); an unknown backend takes cpu's."""
    lo = low.get(backend, low["cpu"])
    if not key_dim:
        return lo
    return min(high.get(backend, high["cpu"]), max(lo, 1 << (int(key_dim) - 1).bit_length()))


def default_blocks(backend: str | None = None, device_kind: str | None = None) -> LinearAttentionBlocks:
    """The backend's blocks; on TPU the generation's row of TPU_BLOCKS, found from `device_kind`
    (default: the first device's kind), DEFAULTS["tpu"] for an unknown TPU."""
    return blocks_for(TPU_BLOCKS, DEFAULTS, backend, device_kind)


def blocks_for(table: dict, defaults: dict, backend: str | None = None,
               device_kind: str | None = None):
    """defaults[backend] off TPU (defaults["cpu"] for an unknown backend); on TPU table[generation]
    found from `device_kind` (default: the first device's kind), defaults["tpu"] for an unknown
    one."""
    backend = backend or jax.default_backend()
    if backend != "tpu":
        return defaults.get(backend, defaults["cpu"])
    if device_kind is None:
        devices = jax.devices()
        device_kind = devices[0].device_kind if devices[0].platform == "tpu" else None
    gen = tpu.generation(device_kind)
    return table[gen.name] if gen else defaults["tpu"]


def _tile(rows: int, width: int, itemsize: int) -> int:
    """VMEM bytes of a [rows, width] block: the lane dim padded to 128 (a [C, 1] block takes a
    full [C, 128] tile)."""
    return rows * (-(-width // _LANE) * _LANE) * itemsize


def vmem_bytes(blocks: LinearAttentionBlocks, key_dim: int, value_dim: int, itemsize: int,
               data_decay: bool = True, segments: bool = True) -> dict:
    """Estimated VMEM bytes of each kernel (forward, intra, dq, reverse) for one grid step:
    2 x (input + output blocks) for double buffering + scratch + temporaries. Temporaries: six
    [C, C] and eight [C, max(k, v)] float32 arrays, plus four [sub, sub, k] ones for the data decay.
    q, k, v, o, do blocks take `itemsize`; the decay, segment counts, states and gradients f32."""
    c, s, k, v = blocks.chunk_size, blocks.sub_chunk, key_dim, value_dim
    f = 4
    q_, v_ = _tile(c, k, itemsize), _tile(c, v, itemsize)
    g32, k32, v32 = _tile(c, k, f), _tile(c, k, f), _tile(c, v, f)
    state = _tile(v, k, f)
    dec = (g32 if data_decay else 0) + (_tile(c, 1, f) if segments else 0)
    temps = 6 * _tile(c, c, f) + 8 * _tile(c, max(k, v), f) + (4 * s * _tile(s, k, f) if data_decay else 0)
    io = {
        "forward": (dec + 2 * q_ + v_ + state, v_ + state, state),
        "intra": (dec + 2 * q_ + 2 * v_, 2 * k32 + v32, 0),
        "dq": (dec + q_ + 2 * v_ + state, k32, state),
        "reverse": (dec + 2 * q_ + 2 * v_ + state, k32 + v32 + state, state),
    }
    return {name: 2 * (i + o) + scratch + temps for name, (i, o, scratch) in io.items()}


def check_vmem(blocks: LinearAttentionBlocks, key_dim: int, value_dim: int, itemsize: int,
               data_decay: bool, segments: bool) -> None:
    """Raise a ValueError when the largest kernel's estimate exceeds half the VMEM limit."""
    require_vmem("linear_attention", blocks,
                 lambda: vmem_bytes(blocks, key_dim, value_dim, itemsize, data_decay, segments))


def require_vmem(op: str, blocks, estimate) -> None:
    """Raise a ValueError when max(estimate().values()) (VMEM bytes per kernel) exceeds half of
    blocks.vmem_limit_bytes (no check without a limit). op names the entry point."""
    if blocks.vmem_limit_bytes is None:
        return
    need = max(estimate().values())
    if 2 * need > blocks.vmem_limit_bytes:
        raise ValueError(
            f"{op}(impl='pallas'): blocks {blocks} need ~{need / 2**20:.1f} MiB of VMEM per "
            f"kernel, over half the {blocks.vmem_limit_bytes / 2**20:.0f} MiB limit; use a "
            "smaller chunk_size or pass blocks with a larger vmem_limit_bytes.")


def check_tiling(blocks: LinearAttentionBlocks, key_dim: int, value_dim: int, num_heads: int,
                 dtype, backend: str) -> None:
    """Raise a ValueError naming the problem when the shapes do not fit the backend's tiling."""
    if backend != "tpu":
        return
    sublane = 16 if jax.numpy.dtype(dtype).itemsize == 2 else 8
    problems = []
    for name, dim in (("key", key_dim), ("value", value_dim)):
        if dim % _LANE and num_heads > 1:
            problems.append(f"{name} head dim {dim} is not a multiple of {_LANE} (TPU lane tiling)")
    if blocks.chunk_size % sublane:
        problems.append(f"chunk_size {blocks.chunk_size} is not a multiple of {sublane} "
                        f"(TPU sublane tiling for {jax.numpy.dtype(dtype).name})")
    if blocks.sub_chunk % 8:
        problems.append(f"sub_chunk {blocks.sub_chunk} is not a multiple of 8")
    if problems:
        raise ValueError(
            "linear_attention(impl='pallas') on TPU: " + "; ".join(problems)
            + ". Use head dims that are multiples of 128 and chunk_size a multiple of 16, "
            "or impl='xla'."
        )
