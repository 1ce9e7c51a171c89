"""The global batch of a step as sharded jax.Arrays, built from the rows this process's devices hold.

    batches = GlobalBatches(data.train_rows(config), batch_sharding)
    batch = batches(step)      # {inputs, targets, segment_ids, weights}: jax.Array [B, t] sharded
                               #   like batch_sharding; the batch that update step + 1 consumes
    batches.local_rows         # the global row indices this process reads (sorted)
    batches.put(batches.local(step)) == batches(step)   # read (host) and put (devices) separately
    batches.state(step); batches.check_state(saved)

The rows a process reads are those of its addressable devices under the batch sharding (rows
split over 'data'/'fsdp', columns over 'seq', replicas over 'tensor'): with P processes holding
disjoint row blocks each reads B/P rows; a mesh axis that spans processes makes them read the same
rows. Row r of step s is the same for every process count (data.rows), so the global array is too.
"""

from __future__ import annotations

import numpy as np
import jax
from jax.sharding import Sharding

BATCH_KEYS = ("inputs", "targets", "segment_ids", "weights")


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

    def state(self, step: int) -> dict:
        return self.source.state(step)

    def check_state(self, state: dict) -> None:
        self.source.check_state(state)
