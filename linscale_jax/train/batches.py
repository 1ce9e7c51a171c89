"""The global batch of a step as sharded jax.Arrays, built from the rows this process's devices hold.

    batches = GlobalBatches(data.train_rows(config), batch_sharding)
    batch = batches(step)      # {inputs, targets, segment_ids, weights}: jax.Array [B, t] sharded
                               #   like batch_sharding; the batch that update step + 1 consumes
    batches.local_rows         # the global row indices this process reads (sorted)
    batches.put(batches.local(step)) == batches(step)   # read (host) and put (devices) separately
    block = batches.put_block(batches.local_block(step, n, k))   # [k, B, t]: steps step..step+n-1,
                                                        #   rows n..k-1 zero (one dispatch's batches)
    for local in batches.blocks(plan, k): ...           # local_block of each (first, n) of a plan,
                                                        #   READ_BYTES of rows or more read at a time
    batches.state(step); batches.check_state(saved)

The rows a process reads are those of its addressable devices under the batch sharding (rows
split over 'data'/'fsdp', columns over 'seq', replicas over 'tensor'): with P processes holding
disjoint row blocks each reads B/P rows; a mesh axis that spans processes makes them read the same
rows. Row r of step s is the same for every process count (data.rows), so the global array is too.
A block's rows are read in one call of the source when it has `rows_of_steps` (prepared records:
one read of k·B rows instead of k reads) and put on the devices as one array per key.
"""

from __future__ import annotations

import numpy as np
import jax
from jax.sharding import NamedSharding, PartitionSpec, Sharding

BATCH_KEYS = ("inputs", "targets", "segment_ids", "weights")
READ_BYTES = 8 << 20  # blocks(): bytes of rows read per call of the source at least (a read has a
#                        fixed cost: about 2 ms of CPU for a prepared corpus's reader)
BYTES_PER_TOKEN = 16  # inputs, targets, segment_ids (int32) and weights (float32)


class GlobalBatches:
    def __init__(self, source, batch_sharding: Sharding):
        self.source, self.sharding = source, batch_sharding
        self.shape = (int(source.batch_size), int(source.seq_len))
        index_map = batch_sharding.addressable_devices_indices_map(self.shape)
        b = self.shape[0]
        rows = sorted({r for idx in index_map.values() for r in range(*idx[0].indices(b))})
        self.local_rows = np.asarray(rows, np.int64)
        self._position = {r: i for i, r in enumerate(rows)}

    def local(self, step: int) -> dict:
        """numpy [len(local_rows), t] per key: the rows of step `step` this process holds."""
        return self.source.rows(step, self.local_rows)

    def __call__(self, step: int) -> dict:
        return self.put(self.local(step))

    def put(self, local: dict) -> dict:
        """The global jax.Arrays of process-local rows (`local(step)`'s output) on the devices."""
        b = self.shape[0]

        def shard(idx, x):
            sel = [self._position[r] for r in range(*idx[0].indices(b))]
            return x[sel][:, idx[1]]

        return {k: jax.make_array_from_callback(self.shape, self.sharding, lambda idx, x=local[k]: shard(idx, x))
                for k in BATCH_KEYS}

    def local_block(self, step: int, n: int, k: int) -> dict:
        """numpy [k, len(local_rows), t] per key: the rows of steps step .. step+n-1 this process
        holds, then k - n steps of zeros (never read: a block runs n steps)."""
        return _padded(self._read(step, n), k)

    def blocks(self, plan, k: int):
        """local_block(first, n, k) of each block (first, n) of `plan` (consecutive blocks, as
        train.blocks.block_plan makes them), in order; consecutive blocks are read together, at
        least READ_BYTES of rows per read."""
        per_step = max(len(self.local_rows), 1) * self.shape[1] * BYTES_PER_TOKEN
        i = 0
        while i < len(plan):
            j, steps = i + 1, plan[i][1]
            while j < len(plan) and steps * per_step < READ_BYTES:
                steps += plan[j][1]
                j += 1
            start = plan[i][0]
            rows = self._read(start, steps)
            for first, n in plan[i:j]:
                yield _padded({key: x[first - start:first - start + n] for key, x in rows.items()}, k)
            i = j

    def _read(self, step: int, n: int) -> dict:
        """numpy [n, len(local_rows), t] per key: steps step .. step+n-1, one read when the source
        can (rows_of_steps)."""
        read = getattr(self.source, "rows_of_steps", None)
        steps = range(step, step + n)
        if read is not None:
            return read(steps, self.local_rows)
        per_step = [self.source.rows(s, self.local_rows) for s in steps]
        return {key: np.stack([r[key] for r in per_step]) for key in per_step[0]}

    def block_sharding(self) -> NamedSharding:
        """The sharding of a block [k, B, t]: the batch sharding's, the block axis unsplit."""
        return NamedSharding(self.sharding.mesh, PartitionSpec(None, *self.sharding.spec))

    def put_block(self, local: dict) -> dict:
        """The global [k, B, t] jax.Arrays of a block's process-local rows (`local_block`'s output)."""
        b = self.shape[0]
        shape = (next(iter(local.values())).shape[0], *self.shape)
        sharding = self.block_sharding()

        def shard(idx, x):
            sel = [self._position[r] for r in range(*idx[1].indices(b))]
            return x[:, sel][:, :, idx[2]]

        return {k: jax.make_array_from_callback(shape, sharding, lambda idx, x=local[k]: shard(idx, x))
                for k in BATCH_KEYS}

    def state(self, step: int) -> dict:
        return self.source.state(step)

    def check_state(self, state: dict) -> None:
        self.source.check_state(state)


def _padded(rows: dict, k: int) -> dict:
    """[n, r, t] per key -> [k, r, t], steps n..k-1 zeros."""
    n = next(iter(rows.values())).shape[0]
    if n == k:
        return rows
    return {key: np.concatenate([x, np.zeros((k - n, *x.shape[1:]), x.dtype)]) for key, x in rows.items()}
