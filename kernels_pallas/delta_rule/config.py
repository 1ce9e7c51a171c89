"""Per-backend block sizes of the delta rule: the one place the defaults live.

`default_chunk_size(impl, key_dim=...)` is what `delta_rule(..., chunk_size=None)` uses: xla -> the
key head dim clamped to [XLA_CHUNK, XLA_CHUNK_MAX] of the backend, swept in blocks of XLA_BLOCK
tokens; pallas -> the generation's DeltaRuleBlocks (TPU_BLOCKS, chosen from jax's device kind by
`default_blocks`; DEFAULTS off TPU, where the kernels run in interpret mode); reference -> 1.

Pallas blocks: the chunk C (one grid step each; a power of two, as the in-kernel inverse doubles
blocks), the grid order and the scoped VMEM limit. Why these: docs/models.md, "The delta rule".
`check_vmem` holds a choice to half the limit; `check_tiling` to TPU tiling (head dims multiples of
128 with several heads, C a multiple of 8, or 16 for bf16 inputs).
"""

from __future__ import annotations

import dataclasses

import jax

from kernels_pallas import tpu
from kernels_pallas.linear_attention.config import GRID_ORDERS, _tile, blocks_for, require_vmem, xla_chunk

# Chunk length of the xla form per backend: the key head dim rounded up to a power of two,
# clamped to [XLA_CHUNK, XLA_CHUNK_MAX] of the backend (fixed on TPU and GPU). The within-chunk
# products cost 2c(3k + 2v) per token and head and the UT inverse ~c², against 6kv for the
# state. CPU [16, 32]: `bench/delta_rule.py --chunk-sizes` sweeps put the best at 16 for k = 16
# and at 16-32 for k = 64 (docs/results.md, "Delta rule speed").
XLA_CHUNK = {"tpu": 64, "gpu": 64, "cpu": 16}
XLA_CHUNK_MAX = {"tpu": 64, "gpu": 64, "cpu": 32}

# Tokens per step of the xla form's outer sequential sweep over blocks (None: the whole sequence
# at once). On CPU a block keeps one step's [n, c, c] arrays in cache, so the time grows linearly
# with the length.
XLA_BLOCK = {"tpu": None, "gpu": None, "cpu": 512}


def xla_block_len(chunk_size: int, backend: str | None = None) -> int | None:
    """Block length of the xla form (a multiple of chunk_size), or None for no blocking."""
    block = XLA_BLOCK.get(backend or jax.default_backend(), XLA_BLOCK["cpu"])
    return None if block is None else max(1, block // chunk_size) * chunk_size


@dataclasses.dataclass(frozen=True)
class DeltaRuleBlocks:
    """chunk_size: tokens per grid step (a power of two); grid_order: "bhn" | "hbn";
    vmem_limit_bytes: Mosaic's scoped VMEM limit (None: the compiler's default)."""

    chunk_size: int = 64
    grid_order: str = "bhn"
    vmem_limit_bytes: int | None = None

    def __post_init__(self):
        c = self.chunk_size
        if c < 1 or c & (c - 1):
            raise ValueError(f"delta_rule blocks: chunk_size={c} must be a power of two.")
        if self.grid_order not in GRID_ORDERS:
            raise ValueError(f"grid_order={self.grid_order!r}: choose one of {GRID_ORDERS}.")


def _tpu_blocks(gen: tpu.TpuGeneration, chunk: int) -> DeltaRuleBlocks:
    return DeltaRuleBlocks(chunk_size=chunk, grid_order="hbn" if gen.tensorcores > 1 else "bhn",
                           vmem_limit_bytes=gen.vmem_bytes * 3 // 4)


# Chunk 64 (fla's): the state products (6kv per token and head) take the same MXU time per token
# at any chunk, the UT inverse's log2(C) dependent [C, C] products grow with C; v6e's 256-wide MXU
# pads C = 64 as much as 128, so there 128 halves the grid steps at about equal MXU time.
TPU_BLOCKS = {
    "v4": _tpu_blocks(tpu.GENERATIONS["v4"], 64),
    "v5e": _tpu_blocks(tpu.GENERATIONS["v5e"], 64),
    "v5p": _tpu_blocks(tpu.GENERATIONS["v5p"], 64),
    "v6e": _tpu_blocks(tpu.GENERATIONS["v6e"], 128),
}
DEFAULTS = {"tpu": DeltaRuleBlocks(64), "gpu": DeltaRuleBlocks(64), "cpu": DeltaRuleBlocks(32)}


def default_blocks(backend: str | None = None, device_kind: str | None = None) -> DeltaRuleBlocks:
    """The backend's blocks; on TPU the generation's row of TPU_BLOCKS (DEFAULTS["tpu"] for an
    unknown one), found from `device_kind` (default: the first device's kind)."""
    return blocks_for(TPU_BLOCKS, DEFAULTS, backend, device_kind)


def default_chunk_size(impl: str, backend: str | None = None, key_dim: int | None = None) -> int:
    """The chunk used when delta_rule gets chunk_size=None: xla -> the key head dim rounded up to
    a power of two, clamped to [XLA_CHUNK, XLA_CHUNK_MAX] of the backend (XLA_CHUNK without
    key_dim); pallas -> the blocks' chunk; reference -> unused (1)."""
    backend = backend or jax.default_backend()
    if impl == "xla":
        return xla_chunk(XLA_CHUNK, XLA_CHUNK_MAX, backend, key_dim)
    if impl == "pallas":
        return default_blocks(backend).chunk_size
    return 1


def vmem_bytes(blocks: DeltaRuleBlocks, key_dim: int, value_dim: int, itemsize: int,
               gated: bool = True, segments: bool = True) -> dict:
    """Estimated VMEM bytes of each kernel (forward, states, reverse) for one grid step:
    2 x (input + output blocks) for double buffering + scratch + temporaries (twelve [C, C] and
    ten [C, max(k, v)] float32 arrays). q, k, v, o, do blocks take `itemsize`; the [C, 1] gate
    columns and segment counts a full [C, 128] f32 tile each; T [C, C], states and gradients
    f32."""
    c, k, v, f = blocks.chunk_size, key_dim, value_dim, 4
    q_, v_, col, tri = _tile(c, k, itemsize), _tile(c, v, itemsize), _tile(c, 1, f), _tile(c, c, f)
    state = _tile(k, v, f)
    gates = col * (1 + gated + segments)
    temps = 12 * _tile(c, c, f) + 10 * _tile(c, max(k, v), f)
    io = {
        "forward": (gates + 2 * q_ + v_ + state, v_ + state + tri, state),
        "states": (gates + q_ + v_ + tri + state, state, state),
        "reverse": (gates + 2 * q_ + 2 * v_ + tri + 2 * state, 2 * _tile(c, k, f) + _tile(c, v, f)
                    + col * (1 + gated) + state, state),
    }
    return {name: 2 * (i + o) + scratch + temps for name, (i, o, scratch) in io.items()}


def check_vmem(blocks: DeltaRuleBlocks, key_dim: int, value_dim: int, itemsize: int,
               gated: bool, segments: bool) -> None:
    """Raise a ValueError when the largest kernel's estimate exceeds half the VMEM limit."""
    require_vmem("delta_rule", blocks,
                 lambda: vmem_bytes(blocks, key_dim, value_dim, itemsize, gated, segments))


def check_tiling(chunk: int, key_dim: int, value_dim: int, num_heads: int, dtype,
                 backend: str) -> None:
    """Raise a ValueError naming the problem when the shapes do not fit the backend's tiling."""
    if backend != "tpu":
        return
    sublane = 16 if jax.numpy.dtype(dtype).itemsize == 2 else 8
    problems = [f"{name} head dim {dim} is not a multiple of 128 (TPU lane tiling)"
                for name, dim in (("key", key_dim), ("value", value_dim))
                if dim % 128 and num_heads > 1]
    if chunk % sublane:
        problems.append(f"chunk_size {chunk} is not a multiple of {sublane} (TPU sublane tiling "
                        f"for {jax.numpy.dtype(dtype).name})")
    if problems:
        raise ValueError("delta_rule(impl='pallas') on TPU: " + "; ".join(problems)
                         + ". Use head dims that are multiples of 128 and chunk_size a multiple "
                         "of 16, or impl='xla'.")
