"""Training metrics: DIR/metrics.jsonl, TensorBoard event files (DIR/tensorboard), a progress line,
and Weights & Biases with train.wandb (a `tracker`, linscale_jax.train.tracking).

metrics.jsonl has one JSON object per logged step: step, loss, lr, grad_norm, tokens,
tokens_per_sec, mfu, flops (paper C so far), mem_gb and mem_peak_gb (device memory in use and its
peak on the fullest local device; on a backend without memory statistics (CPU) the live arrays'
bytes on the first device and no peak), data_wait (share of the interval the devices sat idle
waiting for the next batch), and val_loss on evaluation steps. On resume, rows after the restored
step are dropped so the file reads as one uninterrupted run.
On an object store (gs://...), where a file cannot be appended to, rows go to numbered chunk files
DIR/metrics.jsonl.00000, .00001, ... each written once: the rows buffered since the previous chunk,
every CHUNK_S seconds, at checkpoints and at the end (`read_rows` reads either layout;
`gsutil cat DIR/metrics.jsonl.*` gives the rows in order). Local files are appended to row by row.
`Profile` writes a jax.profiler trace of train.profile_steps=A,B under DIR/profile/.
MFU = accounting.flops_per_token_exact * tokens/s / (peak FLOP/s per device * devices); the peak
is train.peak_flops, else $LINSCALE_PEAK_FLOPS, else a known accelerator's dense bf16 peak (TPUs:
kernels_pallas.tpu), else (CPU) a jitted float32 matmul measured at start-up.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import sys
import time
import jax
import jax.numpy as jnp
import numpy as np
from etils import epath
from kernels_pallas import tpu
from linscale_jax import console, contract

CHUNK_S = 60.0  # object stores: seconds between chunk files of metrics rows
_CHUNK = re.compile(re.escape(contract.METRICS) + r"\.(\d+)$")

# Dense bf16 peak FLOP/s per GPU (vendor figures), matched on jax's device_kind; TPU peaks come
# from kernels_pallas.tpu, the table the kernels' blocks and the roofline read.
GPU_PEAKS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


@functools.lru_cache(maxsize=None)
def measure_matmul_peak(n: int = 1024, reps: int = 5) -> float:
    """FLOP/s of a jitted [n,n]x[n,n] float32 matmul on the default device (best of `reps`)."""
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, a).block_until_ready()
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        f(a, a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def peak_flops_per_device(config=None) -> float:
    if config is not None and float(config.train.get("peak_flops", 0) or 0) > 0:
        return float(config.train.peak_flops)
    if os.environ.get("LINSCALE_PEAK_FLOPS"):
        return float(os.environ["LINSCALE_PEAK_FLOPS"])
    kind = jax.devices()[0].device_kind
    gen = tpu.generation(kind)
    if gen is not None:
        return gen.peak_bf16_flops
    for name, peak in GPU_PEAKS.items():
        if name.lower() in kind.lower():
            return peak
    return measure_matmul_peak()


def fmt_time(s: float) -> str:
    """Seconds as 1h02m03s / 4m05s (progress lines and ETAs)."""
    s = int(max(s, 0))
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def appendable(path) -> bool:
    """Whether files under `path` can be appended to (local disks; not object stores)."""
    return "://" not in str(path)


def _rows_upto(text: str, step: int | None) -> list[str]:
    keep = []
    for line in text.splitlines():
        try:
            if step is None or json.loads(line).get("step", 0) <= step:
                keep.append(line)
        except ValueError:
            continue  # a line cut by a kill
    return keep


def _chunks(workdir) -> list[epath.Path]:
    d = epath.Path(workdir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _CHUNK.match(p.name))]
    return [p for _, p in sorted(found)]


def read_rows(workdir) -> list[dict]:
    """The metrics rows of a workdir, from metrics.jsonl or its chunk files."""
    path = epath.Path(workdir) / contract.METRICS
    texts = [path.read_text()] if path.exists() else []
    texts += [p.read_text() for p in _chunks(workdir)]
    return [json.loads(line) for t in texts for line in _rows_upto(t, None)]


class MetricsLogger:
    """Appends rows to metrics.jsonl (chunk files on object stores) and TensorBoard; prints a
    progress bar with tokens/s and ETA."""

    def __init__(self, workdir, total_steps: int, start_step: int, tensorboard: bool = True,
                 stream=sys.stdout, tracker=None):
        self.workdir = epath.Path(workdir)
        self.path = self.workdir / contract.METRICS
        self.total, self.start = total_steps, start_step
        self.stream, self.t0, self._first = stream, time.perf_counter(), None
        self._tb, self._tracker = None, tracker  # tracker: row -> None (linscale_jax.train.tracking)
        self._append = appendable(self.path)
        self._buffer: list[str] = []
        self._next_chunk, self._chunk_t = 0, time.perf_counter()
        if jax.process_index() == 0:  # process 0 alone writes the shared files
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._truncate_after(start_step)
            if tensorboard:
                self._tb = _tensorboard_writer(self.workdir / "tensorboard")

    def _truncate_after(self, step: int) -> None:
        if self.path.exists():  # (an object store's only rewrite: a file from a local-style run)
            text = self.path.read_text()
            keep = _rows_upto(text, step)
            if len(keep) != len(text.splitlines()):
                self.path.write_text("".join(k + "\n" for k in keep))
        for p in _chunks(self.workdir):  # chunks: drop or shorten the ones past `step`
            text = p.read_text()
            keep = _rows_upto(text, step)
            if not keep:
                p.unlink()
            elif len(keep) != len(text.splitlines()):
                p.write_text("".join(k + "\n" for k in keep))
        chunks = _chunks(self.workdir)
        self._next_chunk = int(_CHUNK.match(chunks[-1].name).group(1)) + 1 if chunks else 0

    def write(self, row: dict) -> None:
        if jax.process_index() != 0:
            return
        line = json.dumps(row) + "\n"
        if self._append:
            with self.path.open("a") as f:
                f.write(line)
        else:
            self._buffer.append(line)
            if time.perf_counter() - self._chunk_t >= CHUNK_S:
                self.flush()
        if self._tb is not None:
            self._tb(row)
        if self._tracker is not None:
            self._tracker(row)

    def flush(self) -> None:
        """Object stores: write the buffered rows as the next chunk file (each written once)."""
        self._chunk_t = time.perf_counter()
        if not self._buffer or jax.process_index() != 0:
            return
        name = f"{contract.METRICS}.{self._next_chunk:05d}"
        (self.workdir / name).write_text("".join(self._buffer))
        self._buffer, self._next_chunk = [], self._next_chunk + 1

    def progress(self, row: dict) -> None:
        if jax.process_index() != 0:
            return
        step, now = row["step"], time.perf_counter()
        elapsed = now - self.t0
        if self._first is None:  # rate from the first logged step on (compilation excluded)
            self._first = (step, now)
            eta = elapsed / max(step - self.start, 1) * (self.total - step)
        else:
            rate = (now - self._first[1]) / max(step - self._first[0], 1)
            eta = rate * (self.total - step)
        frac = step / self.total
        bar = "#" * int(20 * frac) + "." * (20 - int(20 * frac))
        val = f" val_loss {row['val_loss']:.4f}" if "val_loss" in row else ""
        extra = ""
        if row.get("mem_gb") is not None:
            peak = row.get("mem_peak_gb")
            extra += f" mem {_gb(row['mem_gb'])} peak {'n/a' if peak is None else _gb(peak)}"
        if row.get("data_wait") is not None:
            extra += f" data wait {row['data_wait']:.0%}"
        self.stream.write(
            f"[{bar}] step {step}/{self.total} loss {row['loss']:.4f}{val} lr {row['lr']:.2e} "
            f"|g| {row['grad_norm']:.3f} {row['tokens_per_sec']:.0f} tok/s mfu {row['mfu']:.1%}"
            f"{extra} elapsed {fmt_time(elapsed)} ETA {fmt_time(eta)}\n")
        self.stream.flush()

    def close(self) -> None:
        self.flush()
        if self._tb is not None:
            self._tb(None)
        if self._tracker is not None:
            self._tracker(None)


def _gb(x: float) -> str:
    return f"{x:.2f} GB" if x >= 1 else f"{x * 1e3:.1f} MB"


def device_memory() -> tuple[float | None, float | None]:
    """(bytes in use, peak bytes) of the fullest local device from device.memory_stats(); where
    the backend keeps none (CPU): the bytes of the live arrays' shards on the first local device,
    and None for the peak."""
    devices = jax.local_devices()
    try:
        stats = [d.memory_stats() for d in devices]
    except Exception:  # noqa: BLE001 - backends without the call
        stats = [None]
    if all(stats):
        return (float(max(s.get("bytes_in_use", 0) for s in stats)),
                float(max(s.get("peak_bytes_in_use", 0) for s in stats)) or None)
    d0, total = devices[0], 0
    for a in jax.live_arrays():
        try:
            if d0 in a.sharding.device_set:  # a whole copy, or the shard this device holds
                total += a.nbytes if a.is_fully_replicated else \
                    int(np.prod(a.sharding.shard_shape(a.shape))) * a.dtype.itemsize
        except Exception:  # noqa: BLE001 - an array deleted meanwhile, an exotic sharding
            continue
    return float(total), None


def parse_profile_steps(spec) -> tuple[int, int] | None:
    """'A,B' (or 'A') -> (A, B) with 1 <= A <= B; '' -> None."""
    text = str(spec or "").strip()
    if not text:
        return None
    try:
        parts = [int(x) for x in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not 1 <= parts[0] <= parts[1]:
        raise ValueError(f"train.profile_steps={text!r} must be 'A,B' with 1 <= A <= B (the steps "
                         "to trace), e.g. --config.train.profile_steps=10,12.")
    return parts[0], parts[1]


class Profile:
    """A jax.profiler trace of steps A..B (train.profile_steps) written under DIR/profile/ (every
    process writes its host's trace; open it with TensorBoard's profile plugin or Perfetto)."""

    def __init__(self, spec, workdir):
        self.range = parse_profile_steps(spec)
        self.dir = str(epath.Path(workdir) / "profile")
        self.active = self.done = False

    def before(self, step: int) -> None:
        """Step `step` is about to be dispatched."""
        if self.range and not (self.active or self.done) and self.range[0] <= step <= self.range[1]:
            jax.profiler.start_trace(self.dir)
            self.active = True

    def after(self, step: int, outputs) -> bool:
        """Step `step` was dispatched; at B wait for it and write the trace. True when written."""
        if self.active and step >= self.range[1]:
            jax.block_until_ready(outputs)
            self.close()
            return True
        return False

    def close(self) -> None:
        if self.active:
            jax.profiler.stop_trace()
            self.active, self.done = False, True


def _tensorboard_writer(logdir: epath.Path):
    """A function row -> None writing the row's numbers as TensorBoard scalars (None flushes); None
    if TF is absent. The events go straight into an event file (TFRecord framing, TF's writer):
    one record per row, about 20 µs, where tf.summary's eager ops took about 6 ms."""
    try:
        with console.quiet_native_stderr():  # oneDNN / cudart / absl start-up lines: to the log
            import tensorflow as tf
    except ImportError:
        print("TensorBoard event files disabled: tensorflow is not installed.", file=sys.stderr)
        return None
    for kind in ("GPU", "TPU"):  # TensorFlow only writes event files: it must not take accelerators
        try:
            tf.config.set_visible_devices([], kind)
        except (RuntimeError, ValueError):
            pass
    from tensorflow.core.framework import summary_pb2, tensor_pb2, types_pb2
    from tensorflow.core.util import event_pb2

    logdir.mkdir(parents=True, exist_ok=True)
    name = f"events.out.tfevents.{time.time():.6f}.{os.uname().nodename}.{os.getpid()}.v2"
    writer = tf.io.TFRecordWriter(str(logdir / name))
    writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
    # the 'scalars' plugin's own form (what tf.summary.scalar writes): a float32 scalar tensor
    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))

    def write(row):
        if row is None:
            writer.flush()
            return
        values = [summary_pb2.Summary.Value(tag=k, metadata=meta, tensor=tensor_pb2.TensorProto(
            dtype=types_pb2.DT_FLOAT, float_val=[float(v)])) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)]
        event = event_pb2.Event(wall_time=time.time(), step=int(row["step"]),
                                summary=summary_pb2.Summary(value=values))
        writer.write(event.SerializeToString())

    return write
