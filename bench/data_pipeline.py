"""Input pipeline: rows read per process (real processes) and the cost of resuming at a late position.

  python bench/data_pipeline.py --json --processes=1,2,4
  python bench/data_pipeline.py --json --resume_positions=1e5,1e6,1e7
  options: --seq_len=1024 --batch_size=64 --steps=20 --devices_per_process=2 --vocab=byte

--processes: for each count P, P python processes on 127.0.0.1 (jax.distributed, each with
--devices_per_process CPU devices, one 'data' mesh axis over all of them) build the global batches of
--steps steps from the prepared default corpus (linscale_jax.train.batches.GlobalBatches: each reads
only the rows its devices hold and puts them in a sharded jax.Array). One JSON object per P:
  processes, tokens_per_s_per_process (tokens each process read per second, mean over processes),
  share_of_global_batch (tokens each process read / the global batch's tokens, max over processes),
  rows_match_one_process (every process's rows equal the same rows of the 1-process global batch).
--resume_positions: for each position (tokens consumed), the time from opening the records to the
first global batch after that position (a fresh row source: what a restarted run does):
  position_tokens, step, resume_s (median of 3).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def config(args):
    from linscale_jax.config import base_config
    from linscale_jax.data import tokenize

    c = base_config()
    c.data.vocab = args.vocab
    c.train.batch_size, c.train.seq_len = args.batch_size, args.seq_len
    c.model.vocab_size = tokenize.get(args.vocab).vocab_size
    return c


def digest(row) -> str:
    return hashlib.sha1(row.tobytes()).hexdigest()[:16]


def worker(args) -> None:
    """One process of a P-process measurement: prints one JSON line."""
    import jax
    from jax.sharding import NamedSharding

    from linscale_jax import data
    from linscale_jax.parallel import distributed, sharding
    from linscale_jax.train.batches import GlobalBatches

    if args.num_processes > 1:
        distributed.initialize(f"127.0.0.1:{args.port}", args.num_processes, args.process_id)
    c = config(args)
    mesh = sharding.make_mesh(c.mesh)
    batches = GlobalBatches(data.train_rows(c), NamedSharding(mesh, sharding.batch_spec(mesh)))
    jax.block_until_ready(batches(0))  # opens the files, imports Grain
    batches.source.tokens_read = 0
    rows = {}
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        local = batches.local(step)
        jax.block_until_ready(batches.put(local))
        for i, r in enumerate(batches.local_rows):
            rows[f"{step}:{r}"] = digest(local["targets"][i])
    seconds = time.perf_counter() - start
    print(json.dumps(dict(process=jax.process_index(), tokens_read=batches.source.tokens_read, seconds=seconds,
                          local_rows=len(batches.local_rows), rows=rows)), flush=True)


def run_processes(args, p: int) -> list[dict]:
    from linscale_jax.parallel import distributed

    port = distributed.free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} "
                         f"--xla_force_host_platform_device_count={args.devices_per_process}")
    flags = [f"--seq_len={args.seq_len}", f"--batch_size={args.batch_size}", f"--steps={args.steps}",
             f"--vocab={args.vocab}", f"--num_processes={p}", f"--port={port}"]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", f"--process_id={i}", *flags], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(p)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        if proc.returncode:
            raise SystemExit(f"worker failed ({proc.returncode}):\n{err[-3000:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def processes_bench(args, counts) -> list[dict]:
    from linscale_jax import data

    data.records_dir(config(args))  # prepared once here, not raced by the workers
    global_tokens = args.steps * args.batch_size * args.seq_len
    results, reference = [], None
    for p in counts:
        outs = run_processes(args, p)
        rows = {k: v for o in outs for k, v in o["rows"].items()}
        is_reference = reference is None and p == 1
        if is_reference:
            reference = rows
        results.append(dict(
            processes=p,
            tokens_per_s_per_process=round(statistics.mean(o["tokens_read"] / o["seconds"] for o in outs)),
            share_of_global_batch=round(max(o["tokens_read"] for o in outs) / global_tokens, 4),
            rows_match_one_process=None if is_reference else all(reference.get(k) == v for k, v in rows.items()),
            rows_per_process=max(o["local_rows"] for o in outs),
            seq_len=args.seq_len, batch_size=args.batch_size, steps=args.steps))
    return results


def resume_bench(args, positions) -> list[dict]:
    from jax.sharding import NamedSharding

    from linscale_jax import data
    from linscale_jax.parallel import sharding
    from linscale_jax.train.batches import GlobalBatches

    c = config(args)
    mesh = sharding.make_mesh(c.mesh)
    shard = NamedSharding(mesh, sharding.batch_spec(mesh))
    GlobalBatches(data.train_rows(c), shard)(0)  # imports and the cache outside the clock
    tokens_per_step = args.batch_size * args.seq_len
    out = []
    for pos in positions:
        step = int(pos // tokens_per_step)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            batches = GlobalBatches(data.train_rows(c), shard)
            batches.check_state(batches.state(step))
            batches(step)["targets"].block_until_ready()
            times.append(time.perf_counter() - start)
        out.append(dict(position_tokens=int(pos), step=step, resume_s=round(statistics.median(times), 4)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--processes", default="", help="comma-separated process counts, e.g. 1,2,4")
    parser.add_argument("--resume_positions", default="", help="comma-separated token positions, e.g. 1e5,1e6")
    parser.add_argument("--seq_len", type=int, default=1024)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--devices_per_process", type=int, default=2)
    parser.add_argument("--vocab", default="byte")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--process_id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--num_processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    results = []
    if args.processes:
        counts = [int(x) for x in args.processes.split(",")]
        if 1 not in counts:
            counts = [1] + counts  # the reference rows
        results += processes_bench(args, counts)
    if args.resume_positions:
        results += resume_bench(args, [float(x) for x in args.resume_positions.split(",")])
    if not results:
        parser.error("give --processes and/or --resume_positions")
    for r in results:
        print(json.dumps(r) if args.json else "  ".join(f"{k}={v}" for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
