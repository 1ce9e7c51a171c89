"""TensorFlow, imported once and tamed for an input pipeline that shares the host with JAX.

TensorFlow only feeds data here: it must not see accelerators (it would reserve their memory) nor
spread over every CPU core (the JAX step needs them). Import `tf` from this module, never directly,
so these settings are applied before TensorFlow initialises its runtime.
Importing TensorFlow + seqio costs several seconds.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # silence C++ info logs before the import

import sys  # noqa: E402

# keras (pulled in by TensorFlow and tensorflow_text) imports scikit-learn only for its sklearn
# wrappers, ~1-4 s of CPU at import; hide sklearn while importing, restore afterwards.
_hide_sklearn = "sklearn" not in sys.modules
if _hide_sklearn:
    sys.modules["sklearn"] = None  # type: ignore[assignment]
from linscale_jax.console import quiet_native_stderr  # noqa: E402

with quiet_native_stderr():  # oneDNN / cudart / cuInit / absl::InitializeLog start-up lines
    try:
        import tensorflow as tf  # noqa: E402
        import seqio  # noqa: E402,F401  (imports tensorflow_text, keras)
    finally:
        if _hide_sklearn:
            del sys.modules["sklearn"]
    try:
        tf.config.set_visible_devices([], "GPU")
        tf.config.set_visible_devices([], "TPU")
    except (RuntimeError, ValueError):  # runtime already initialised or no such device type
        pass

TF_THREADS = 2  # inter-op threads for tf.data; decoding and tokenising are light
try:
    tf.config.threading.set_inter_op_parallelism_threads(TF_THREADS)
    tf.config.threading.set_intra_op_parallelism_threads(1)
except RuntimeError:
    pass


def dataset_options() -> tf.data.Options:
    """Options for every pipeline here: deterministic order, a small private thread pool."""
    options = tf.data.Options()
    options.deterministic = True
    options.threading.private_threadpool_size = TF_THREADS
    options.threading.max_intra_op_parallelism = 1
    return options
