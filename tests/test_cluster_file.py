"""cluster/ray-gcp.yaml is a cluster `ray up` accepts and one the study can run on: Ray's own
preparation and schema check (what `ray up` does before it calls Google Cloud), a CPU head that
takes no runs, single-host TPU VMs whose declared chips match their accelerator type, and on every
node a Python the project supports with the project installed from the clone, pinned by its
requirements.txt ([cluster] everywhere, [tpu] on the TPU workers). Under a second of CPU."""

import copy
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
yaml = pytest.importorskip("yaml")  # with ray: the [cluster] extra
util = pytest.importorskip("ray.autoscaler._private.util")


@pytest.fixture(scope="module")
def cluster():
    raw = yaml.safe_load((REPO / "cluster" / "ray-gcp.yaml").read_text())
    prepared = util.prepare_config(copy.deepcopy(raw))
    util.validate_config(prepared)  # Ray's schema (ray-schema.json) on the config ray up would use
    return raw, prepared


def setups(prepared):
    """{node type: the setup commands the autoscaler runs on it}."""
    out = {}
    for name, node in prepared["available_node_types"].items():
        if name == prepared["head_node_type"]:
            out[name] = prepared["head_setup_commands"]
        else:  # a type's own list replaces the merged general one
            out[name] = node.get("worker_setup_commands", prepared["worker_setup_commands"])
    return out


def test_ray_accepts_it_on_google_cloud(cluster):
    raw, prepared = cluster
    assert prepared["provider"]["type"] == "gcp" and prepared["provider"]["availability_zone"].startswith(
        prepared["provider"]["region"])
    head = prepared["available_node_types"][prepared["head_node_type"]]
    assert "machineType" in head["node_config"] and head["resources"] == {"CPU": 0}  # the driver only
    assert raw["file_mounts"] == {"~/linscale_jax": "."}
    assert sum(t["max_workers"] for t in prepared["available_node_types"].values()) <= prepared["max_workers"]


def test_tpu_workers_are_single_host_slices_declaring_their_chips(cluster):
    from ray._private.accelerators import TPUAcceleratorManager, tpu

    _, prepared = cluster
    tpus = {n: t for n, t in prepared["available_node_types"].items() if "acceleratorType" in t["node_config"]}
    assert tpus
    for name, node in tpus.items():
        kind = node["node_config"]["acceleratorType"]
        assert "machineType" not in node["node_config"] and node["node_config"]["runtimeVersion"]
        assert TPUAcceleratorManager.is_valid_tpu_accelerator_type(kind), kind
        chips = int(kind.split("-")[1]) // tpu.get_tpu_cores_per_chip(kind)
        assert chips <= tpu.get_num_tpu_visible_chips_per_host(kind), f"{name}: a multi-host slice"
        assert node["resources"] == {"TPU": chips}, name


def test_every_node_installs_the_project_pinned(cluster):
    _, prepared = cluster
    supported = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    minor = int(re.search(r">=3\.(\d+)", supported["requires-python"]).group(1))
    extras = set(supported["optional-dependencies"])
    for name, commands in setups(prepared).items():
        text = "\n".join(commands)
        venv = re.search(r"python3\.(\d+) -m venv ~/venv", text)
        assert venv and int(venv.group(1)) >= minor, name
        install = re.search(r'~/venv/bin/pip install -q "\$HOME/linscale_jax\[([\w,]+)\]"'
                            r"( -c ~/linscale_jax/requirements\.txt)", text)
        assert install, f"{name}: the project is not installed pinned by requirements.txt"
        wanted = set(install.group(1).split(","))
        assert "cluster" in wanted and wanted <= extras, name
        assert ("tpu" in wanted) == ("acceleratorType" in prepared["available_node_types"][name]["node_config"])
    for command in prepared["head_start_ray_commands"] + prepared["worker_start_ray_commands"]:
        assert "ray " not in command.replace("~/venv/bin/ray ", ""), command  # the venv's Ray
