"""Training metrics: DIR/metrics.jsonl, TensorBoard event files (DIR/tensorboard), a progress line.

metrics.jsonl has one JSON object per logged step: step, loss, lr, grad_norm, tokens,
tokens_per_sec, mfu, flops (paper C so far), and val_loss on evaluation steps. On resume, rows
after the restored step are dropped so the file reads as one uninterrupted run.
MFU = accounting.flops_per_token_exact * tokens/s / (peak FLOP/s per device * devices); the peak
is train.peak_flops, else $LINSCALE_PEAK_FLOPS, else a known accelerator's dense bf16 peak, else
(CPU) a jitted float32 matmul measured at start-up.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
import jax
import jax.numpy as jnp
from etils import epath
from linscale_jax import contract

# Dense bf16 peak FLOP/s per device (vendor figures), matched on jax's device_kind.
KNOWN_PEAKS = {
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v5": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "H100": 989e12,
    "H200": 989e12,
    "A100": 312e12,
}


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
    for name, peak in KNOWN_PEAKS.items():
        if name.lower() in kind.lower():
            return peak
    return measure_matmul_peak()


def fmt_time(s: float) -> str:
    """Seconds as 1h02m03s / 4m05s (progress lines and ETAs)."""
    s = int(max(s, 0))
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class MetricsLogger:
    """Appends rows to metrics.jsonl and TensorBoard; prints a progress bar with tokens/s and ETA."""

    def __init__(self, workdir, total_steps: int, start_step: int, tensorboard: bool = True,
                 stream=sys.stdout):
        self.path = epath.Path(workdir) / contract.METRICS
        self.total, self.start = total_steps, start_step
        self.stream, self.t0, self._first = stream, time.perf_counter(), None
        self._tb = None
        if jax.process_index() == 0:  # process 0 alone writes the shared files
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._truncate_after(start_step)
            if tensorboard:
                self._tb = _tensorboard_writer(epath.Path(workdir) / "tensorboard")

    def _truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        keep = []
        for line in self.path.read_text().splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    keep.append(line)
            except ValueError:
                continue  # a line cut by a kill
        self.path.write_text("".join(k + "\n" for k in keep))

    def write(self, row: dict) -> None:
        if jax.process_index() != 0:
            return
        line = json.dumps(row) + "\n"
        if "://" in str(self.path):  # object stores (gs://) cannot append: rewrite the small file
            self.path.write_text((self.path.read_text() if self.path.exists() else "") + line)
        else:
            with self.path.open("a") as f:
                f.write(line)
        if self._tb is not None:
            self._tb(row)

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
        extra = f" val_loss {row['val_loss']:.4f}" if "val_loss" in row else ""
        self.stream.write(
            f"[{bar}] step {step}/{self.total} loss {row['loss']:.4f}{extra} lr {row['lr']:.2e} "
            f"|g| {row['grad_norm']:.3f} {row['tokens_per_sec']:.0f} tok/s mfu {row['mfu']:.1%} "
            f"elapsed {fmt_time(elapsed)} ETA {fmt_time(eta)}\n")
        self.stream.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb(None)


def _tensorboard_writer(logdir: epath.Path):
    """A function row -> None writing scalars with tf.summary (None flushes); None if TF is absent."""
    try:
        import tensorflow as tf
    except ImportError:
        print("TensorBoard event files disabled: tensorflow is not installed.", file=sys.stderr)
        return None
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:
        pass
    from tensorflow.core.framework import summary_pb2

    # tf.summary.write with the 'scalars' plugin tag: what tensorboard.summary.scalar writes,
    # without needing the tensorboard package at training time.
    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    writer = tf.summary.create_file_writer(str(logdir))

    def write(row):
        if row is None:
            writer.flush()
            return
        with writer.as_default():
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                    tf.summary.write(k, tf.constant(float(v), tf.float32), step=row["step"],
                                     metadata=meta)

    return write
