"""Input-pipeline timings on this machine: import, first batch, throughput, restore of a late position.

  python bench/data_pipeline.py [--vocab=byte|sentencepiece:FILE.model] [--batches=200]

Prints one line per measurement (seconds, and tokens/s relative to nothing else: the pipeline only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vocab", default="byte")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    args = parser.parse_args()

    cpu0, wall0 = time.process_time(), time.perf_counter()
    from linscale_jax import data
    from linscale_jax.config import base_config

    print(f"import linscale_jax.data (TensorFlow + seqio): {time.perf_counter() - wall0:.2f}s wall, "
          f"{time.process_time() - cpu0:.2f}s CPU")
    c = base_config()
    c.data.vocab = args.vocab
    c.train.batch_size, c.train.seq_len = args.batch_size, args.seq_len
    c.model.vocab_size = data.get_vocabulary(c.data).vocab_size

    start = time.perf_counter()
    it = data.make_iterator(c)
    next(it)
    print(f"first batch (stdlib listing + first documents): {time.perf_counter() - start:.3f}s")

    start = time.perf_counter()
    for _ in range(args.batches):
        next(it)
    elapsed = time.perf_counter() - start
    tokens = args.batches * args.batch_size * args.seq_len
    print(f"{args.batches} batches [{args.batch_size},{args.seq_len}]: {elapsed:.3f}s, {tokens / elapsed:,.0f} tokens/s")

    state = json.loads(json.dumps(it.get_state()))
    expected = next(it)
    start = time.perf_counter()
    resumed = data.make_iterator(c)
    resumed.set_state(state)
    got = next(resumed)
    same = all((got[k] == expected[k]).all() for k in got)
    print(f"restore after {state['batches']} batches (epoch {state['epoch']}, doc {state['doc']}): "
          f"{time.perf_counter() - start:.3f}s to the next batch, identical={same}")

    late = dict(state, epoch=50, doc=400, offset=1000, batches=10**6)  # ~50 epochs in
    start = time.perf_counter()
    resumed.set_state(late)
    next(resumed)
    print(f"restore at epoch 50, document 400: {time.perf_counter() - start:.3f}s to the next batch")


if __name__ == "__main__":
    main()
