"""Per-backend block sizes of linear attention: the one place the defaults live.

`default_chunk_size(impl, key_dim=...)` is what `linear_attention(..., chunk_size=None)` uses (the
models pass None): Pallas -> DEFAULTS[backend].chunk_size (TPU 128), xla -> the key head dim clamped
to [XLA_CHUNK, XLA_CHUNK_MAX][backend]; the xla form's outer block sweep length is XLA_BLOCK[backend];
whether it recomputes the data-decay block terms in the backward is XLA_REMAT_DATA_DECAY[backend].

Pallas kernels:
The kernels walk the sequence in chunks of `chunk_size` tokens (one grid step per chunk, the fp32
state [v, k] carried in scratch). The data-dependent (per key channel) decay splits each chunk into
sub-chunks of `sub_chunk` rows: pairs of rows in different sub-chunks use the matmul form with a
reference point between them (every exponent <= 0), pairs inside one sub-chunk use an exact
[sub_chunk, sub_chunk, k] elementwise form. No exponent is ever positive.

The key/value head dims are not blocked: every model in the paper uses 128 (cosFormer2 256 for q/k),
and one 256 x 128 fp32 state is 128 KiB of VMEM. On TPU the head dims must be multiples of 128
(lane tiling) and chunk sizes multiples of 8 (16 for bf16 inputs: sublane tiling).
"""

from __future__ import annotations

import dataclasses

import jax

_LANE = 128


@dataclasses.dataclass(frozen=True)
class LinearAttentionBlocks:
    """chunk_size: tokens per grid step; sub_chunk: diagonal sub-block of the data-dependent decay."""

    chunk_size: int = 64
    sub_chunk: int = 16

    def __post_init__(self):
        if self.chunk_size < 1 or self.sub_chunk < 1:
            raise ValueError(f"block sizes must be positive, got {self}.")
        if self.chunk_size % self.sub_chunk:
            raise ValueError(
                f"chunk_size={self.chunk_size} must be a multiple of sub_chunk={self.sub_chunk}."
            )

    def with_chunk_size(self, chunk_size: int) -> "LinearAttentionBlocks":
        """The same defaults with another chunk size (sub_chunk shrunk to divide it if needed)."""
        sub = self.sub_chunk
        while chunk_size % sub:
            sub //= 2
        return LinearAttentionBlocks(chunk_size=chunk_size, sub_chunk=max(sub, 1))


DEFAULTS = {
    "tpu": LinearAttentionBlocks(chunk_size=128, sub_chunk=16),
    "gpu": LinearAttentionBlocks(chunk_size=64, sub_chunk=16),
    "cpu": LinearAttentionBlocks(chunk_size=64, sub_chunk=16),  # Pallas interpret mode
}


# Chunk length of the chunked XLA form (impl="xla") per backend. Per token and head the chunk
# costs 2c(k + v) in its within-chunk products against 4kv for the state, so the best chunk grows
# with the key head dim k: the chunk is k rounded up to a power of two, clamped to
# [XLA_CHUNK, XLA_CHUNK_MAX] of the backend (fixed on TPU and GPU). CPU [16, 64]: at k = 8
# (the CPU ladder) 16 beat 32 and 64 in the d256 train step of every linear model, as the small
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
# sizes; the recompute was ~3 % of the HGRN2 d256 train step; docs/results.md, "Several hosts, and MFU").
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
        low = XLA_CHUNK.get(backend, XLA_CHUNK["cpu"])
        if not key_dim:
            return low
        high = XLA_CHUNK_MAX.get(backend, XLA_CHUNK_MAX["cpu"])
        return min(high, max(low, 1 << (int(key_dim) - 1).bit_length()))
    return 1


def default_blocks(backend: str | None = None) -> LinearAttentionBlocks:
    backend = backend or jax.default_backend()
    return DEFAULTS.get(backend, DEFAULTS["cpu"])


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
