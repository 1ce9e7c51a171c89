"""Test-wide setup: CPU only, quiet TensorFlow, no GCE metadata probes, the repository root
importable, and what makes the suite quick on 2 cores: cheap XLA compiles, one compilation cache
per run, two xdist workers.

- XLA_FLAGS gains --xla_backend_optimization_level=0 (LLVM without its optimisation passes) and
  --xla_cpu_use_fusion_emitters=false (XLA's elemental fusion codegen instead of the MLIR fusion
  emitters): the tests compile several hundred tiny programs and run each a few times, so
  compiling is most of their time, and the two together cut it by about 2.5x (the HLO passes --
  fusion, simplification, sharding -- still run; only the CPU code generation is cheaper). An
  XLA_FLAGS that already names one of them keeps its value (=3 / =true are XLA's defaults).
- XLA:CPU's own fusions, not YNNPACK's, as the entry points set (linscale_jax.parallel.cpu_codegen).
- A fresh, empty persistent compilation cache per test run (a temp dir, removed afterwards), shared
  by the xdist workers and the subprocesses the tests start, so the same train step compiled by
  a second test, worker or CLI process is read back instead of rebuilt, and nothing depends on
  what an earlier run left in ~/.cache. LINSCALE_COMPILATION_CACHE set by the caller wins
  (=off: no cache).
- A fresh prepared-records cache per test run likewise (LINSCALE_DATA_CACHE, data.rows): the
  default corpus is prepared once per run (seconds) and the test corpora do not pile up in ~/.cache.
- Two xdist workers for a run over test directories (pyproject's `-n auto --dist loadfile`: a test
  file per worker at a time, so module fixtures are built once); a run naming test files or ids
  stays in this process.
"""

import os
import pathlib
import shutil
import sys
import tempfile

import pytest

from linscale_jax.parallel import cpu_codegen

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# Offline tests: TensorFlow's GCS file system must not probe the GCE metadata server (the library
# leaves it on, so gs:// works with a TPU VM's service account).
os.environ.setdefault("NO_GCE_CHECK", "true")
_TEST_XLA_FLAGS = {
    "xla_backend_optimization_level": "0",
    "xla_cpu_use_fusion_emitters": "false",
}
for _flag, _value in _TEST_XLA_FLAGS.items():
    if _flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{_flag}={_value}".strip()
cpu_codegen.use_xla_fusions()

_FRESH_CACHE = None
_FRESH_DATA = None


def pytest_configure(config):
    """The controller (or a run without xdist) makes the run's cache; workers inherit the env."""
    global _FRESH_CACHE, _FRESH_DATA
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # the order of pytest_collection_modifyitems below
    if not hasattr(config, "workerinput") and not os.environ.get("LINSCALE_COMPILATION_CACHE"):
        _FRESH_CACHE = tempfile.mkdtemp(prefix="linscale-test-xla-cache-")
        os.environ["LINSCALE_COMPILATION_CACHE"] = _FRESH_CACHE
    if not hasattr(config, "workerinput") and not os.environ.get("LINSCALE_DATA_CACHE"):
        _FRESH_DATA = tempfile.mkdtemp(prefix="linscale-test-records-")
        os.environ["LINSCALE_DATA_CACHE"] = _FRESH_DATA


def pytest_xdist_auto_num_workers(config):
    """Workers for pyproject's `-n auto`: 2 for a run over test directories (the README's test
    command, CI's), none (this process) for a run that names test files or ids, so a targeted
    run starts no workers. PYTEST_XDIST_AUTO_NUM_WORKERS=N or -n N choose otherwise."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    here = config.invocation_params.dir
    targeted = any(not (here / pathlib.Path(a.split("::")[0])).is_dir() for a in config.args)
    return 0 if targeted or (os.cpu_count() or 1) < 2 else 2


# The longest test files (subprocesses, trained runs, many compiles; --durations on 2 cores), in
# that order. Under xdist each worker takes the next file when it finishes one, and xdist alone
# orders files by their number of tests, which put these few-test files last, so a run could end
# on one of them while the other worker idled. They go first, longest first; the rest follow by
# number of tests (xdist's own order).
LONG_FILES = (
    "study/test_study.py", "study/test_ray_backend_runs.py", "study/test_study_faults.py", "study/test_tune.py",
    "study/test_ray_backend_teardown.py", "study/test_ray_backend_cluster.py",
    "models/test_models_shard_map.py",
    "train/test_multihost.py", "train/test_failures.py", "train/test_sharding.py", "study/test_study_stop.py",
    "train/test_nothing_lost.py", "study/test_recall.py", "train/test_train_resume.py", "models/test_models.py",
    "train/test_run_integrity.py", "train/test_prepare_faults.py", "kernels/test_pallas_linear_attention.py",
    "train/test_train.py", "kernels/test_kernels_segments.py", "eval/test_eval_generate.py",
    "models/test_dead_params.py", "interop/test_interop_parity.py", "models/test_describe.py",
)


def pytest_collection_modifyitems(config, items):
    """On xdist workers: LONG_FILES first, then the other files by number of tests (stable)."""
    if not hasattr(config, "workerinput"):
        return
    root = pathlib.Path(__file__).parent
    rank = {str(root / f): i for i, f in enumerate(LONG_FILES)}
    count = {}
    for item in items:
        count[str(item.path)] = count.get(str(item.path), 0) + 1
    items.sort(key=lambda it: (rank.get(str(it.path), len(rank)), -count[str(it.path)]))


def pytest_unconfigure(config):
    for path in (_FRESH_CACHE, _FRESH_DATA):
        if path:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _compilation_cache():
    """Every compilation of the test run goes through the run's cache (not only trainer.train's);
    a test run whose tests never imported jax (fit/, the CLI-style checks) skips the import."""
    if "jax" in sys.modules:
        from linscale_jax.train.loop import enable_compilation_cache

        enable_compilation_cache()
