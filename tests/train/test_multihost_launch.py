"""Launch arguments of a multi-process run: flags over LINSCALE_* variables, auto-detection kept,
clear errors for incomplete or inconsistent launches (no processes are started here)."""

import pytest

from linscale_jax.dist import distributed

CLUSTER = ("TPU_WORKER_HOSTNAMES", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "JAX_COORDINATOR_ADDRESS",
           *distributed.ENV)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in CLUSTER:
        monkeypatch.delenv(k, raising=False)


def test_single_process_initialises_nothing():
    assert distributed.launch_args() is None
    assert distributed.launch_args(num_processes=1) is None


def test_flags_win_over_environment(monkeypatch):
    monkeypatch.setenv("LINSCALE_COORDINATOR_ADDRESS", "10.0.0.9:1")
    monkeypatch.setenv("LINSCALE_NUM_PROCESSES", "4")
    monkeypatch.setenv("LINSCALE_PROCESS_ID", "3")
    assert distributed.launch_args() == dict(coordinator_address="10.0.0.9:1", num_processes=4,
                                             process_id=3)
    assert distributed.launch_args("127.0.0.1:5", 2, 1) == dict(
        coordinator_address="127.0.0.1:5", num_processes=2, process_id=1)


def test_cluster_environment_is_auto_detected(monkeypatch):
    monkeypatch.setenv("SLURM_NTASKS", "8")
    assert distributed.launch_args() == {}  # jax.distributed.initialize() reads SLURM itself
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "a,b")
    assert distributed.launch_args(process_id=1) == dict(process_id=1)


def test_incomplete_or_inconsistent_launch_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:7")  # the JAX_* route: incomplete settings are a clear error
    with pytest.raises(distributed.LaunchError, match="needs --num_processes, --process_id"):
        distributed.launch_args()
    with pytest.raises(distributed.LaunchError, match=r"--process_id=2 must be in \[0, --num_processes=2\)"):
        distributed.launch_args(num_processes=2, process_id=2)
    with pytest.raises(distributed.LaunchError, match="HOST:PORT"):
        distributed.launch_args("localhost", 2, 0)
    monkeypatch.setenv("LINSCALE_NUM_PROCESSES", "two")
    with pytest.raises(distributed.LaunchError, match="LINSCALE_NUM_PROCESSES='two' is not an integer"):
        distributed.launch_args()


def test_loopback_detection():
    assert distributed._is_loopback("127.0.0.1:1234") and distributed._is_loopback("localhost:1")
    assert distributed._is_loopback("[::1]:80")
    assert not distributed._is_loopback("10.0.0.2:1234") and not distributed._is_loopback(None)
