"""The study directory is the same on every node of the Ray cluster (study.ray_backend).

    check_storage(ray, DIR)   # ClusterError naming the nodes that cannot read a file written there

DIR must be one directory for every node: a file system mounted at the same path everywhere, or
gs://. The driver checks it at submission on every node alive then; every run checks again when
it starts (study.ray_backend.task: a node added later).
"""

from __future__ import annotations

import uuid

from linscale_jax.study import files
from linscale_jax.study.ray_backend.cluster import ClusterError


def check_storage(ray, study_dir: str) -> None:
    """Every node alive can read a file the driver wrote under `study_dir` (ClusterError naming
    the nodes that cannot)."""
    from etils import epath
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = uuid.uuid4().hex
    path = epath.Path(files.study_path(study_dir, f".storage-check-{token}"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token)

    def probe(p, want):
        from etils import epath as ep

        try:
            return ep.Path(p).read_text() == want
        except OSError:
            return False

    remote = ray.remote(probe)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    try:
        seen = ray.get([remote.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(str(path), token) for n in nodes], timeout=300)
    finally:
        path.unlink(missing_ok=True)
    blind = [f"{n.get('NodeManagerAddress')} ({n['NodeID'][:8]})" for n, ok in zip(nodes, seen) if not ok]
    if blind:
        raise ClusterError(
            f"the study directory {study_dir} is not visible from node(s) {', '.join(blind)} of the "
            "Ray cluster; put it on storage every node mounts at the same path (NFS, GCS FUSE) or "
            "on gs://, and pass that --workdir")
