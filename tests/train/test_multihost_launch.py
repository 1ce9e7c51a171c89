"""Launch arguments of a multi-process run: flags over LINSCALE_* variables, auto-detection kept,
clear errors for incomplete or inconsistent launches, TPU VM detection on a faked host (/dev,
/sys, a metadata server on 127.0.0.1); no processes are started here."""

import http.server
import threading

import jax
import pytest

from linscale_jax.parallel import distributed

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


# ---------------------------------------------------------------- TPU VMs (faked: no network)


@pytest.fixture(autouse=True)
def no_tpu(monkeypatch):
    for k in (*distributed.TPU_ENV, "GCE_METADATA_IP"):
        monkeypatch.delenv(k, raising=False)


def fake_host(root, accel=0, pci=()):
    """A fake / with `accel` /dev/accel* nodes and PCI devices [(vendor, device), ...]."""
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for i in range(accel):
        (root / "dev" / f"accel{i}").write_text("")
    for i, (vendor, device) in enumerate(pci):
        d = root / "sys" / "bus" / "pci" / "devices" / f"0000:00:0{i}.0"
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
    return str(root)


def test_tpu_chips_from_dev_accel_or_the_pci_bus(tmp_path):
    assert distributed.tpu_chips(fake_host(tmp_path / "v4", accel=4)) == 4
    v5e = fake_host(tmp_path / "v5e", pci=[("0x1ae0", "0x0063"), ("0x1ae0", "0x0042")])
    assert distributed.tpu_chips(v5e) == 1  # 0x0042 is Google's virtual NIC, not a TPU
    assert distributed.tpu_chips(fake_host(tmp_path / "cpu", pci=[("0x8086", "0x1237")])) == 0


class Metadata(http.server.BaseHTTPRequestHandler):
    """A GCE metadata server on 127.0.0.1 answering worker-network-endpoints."""

    endpoints, seen = "", []

    def do_GET(self):  # noqa: N802
        Metadata.seen.append((self.path, self.headers.get("Metadata-Flavor")))
        body = Metadata.endpoints.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metadata_server(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{server.server_port}")
    Metadata.seen = []
    yield Metadata
    server.shutdown()


def on_tpu_vm(monkeypatch, tmp_path, chips=4):
    root = fake_host(tmp_path / "root", accel=chips)
    real = distributed.tpu_chips
    monkeypatch.setattr(distributed, "tpu_chips", lambda _root="/": real(root))


def test_gce_tpu_vm_slice_calls_initialize_without_arguments(monkeypatch, tmp_path,
                                                               metadata_server):
    """A v4-16 slice on GCE: no TPU variables in the environment, /dev/accel*, and the worker
    list on the metadata server -> jax.distributed.initialize() with no arguments."""
    on_tpu_vm(monkeypatch, tmp_path)
    metadata_server.endpoints = "w-0:uid0:10.130.0.2,w-1:uid1:10.130.0.3"
    assert distributed.tpu_hosts() == 2 and distributed.launch_args() == {}
    assert metadata_server.seen[-1] == (
        "/computeMetadata/v1/instance/attributes/worker-network-endpoints", "Google")
    calls = []
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    monkeypatch.setattr(distributed, "_cpu_platform", lambda: False)
    assert distributed.initialize() and len(calls) == 1
    # no coordinator, process count or id: JAX reads them from the TPU VM; only the peer timeouts
    assert not {"coordinator_address", "num_processes", "process_id"} & set(calls[0]), calls
    assert set(calls[0]) <= {"initialization_timeout", "heartbeat_timeout_seconds",
                             "shutdown_timeout_seconds"}, calls


def test_single_host_tpu_vm_initialises_nothing(monkeypatch, tmp_path, metadata_server):
    on_tpu_vm(monkeypatch, tmp_path)
    metadata_server.endpoints = "w-0:uid0:10.130.0.2"
    assert distributed.tpu_hosts() == 1 and distributed.launch_args() is None


def test_tpu_vm_without_a_metadata_server_is_one_host(monkeypatch, tmp_path):
    on_tpu_vm(monkeypatch, tmp_path)
    monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{distributed.free_port()}")  # nobody there
    assert distributed.tpu_hosts() == 1 and distributed.launch_args() is None


def test_tpu_variables_describe_the_slice_without_asking_metadata(monkeypatch, tmp_path):
    monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{distributed.free_port()}")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "t-0,t-1,t-2,t-3")  # GKE
    monkeypatch.setenv("TPU_WORKER_ID", "2")
    assert distributed.tpu_vm() and distributed.tpu_hosts() == 4
    assert distributed.launch_args() == {}
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "localhost")
    assert distributed.launch_args() is None
    monkeypatch.setenv("MEGASCALE_NUM_SLICES", "2")  # two single-host slices
    assert distributed.tpu_hosts() == 2 and distributed.launch_args() == {}


def test_no_tpu_no_metadata_query(monkeypatch, tmp_path):
    monkeypatch.setattr(distributed, "gce_worker_endpoints",
                        lambda: pytest.fail("asked the metadata server off a TPU VM"))
    monkeypatch.setattr(distributed, "tpu_chips", lambda _root="/": 0)
    assert distributed.tpu_hosts() == 0 and distributed.launch_args() is None


def test_gs_workdir_of_the_error_log_stays_gs():
    from linscale_jax.run import command

    d = command.as_dir("gs://bucket/runs/a")
    assert str(d) == "gs://bucket/runs/a" and str(d / "logs") == "gs://bucket/runs/a/logs"
