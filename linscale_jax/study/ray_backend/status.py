"""DIR/runs/<run>/status.json: one run's state on Ray (study.ray_backend).

    write_status(run.workdir, state="running", attempt=2, ...)   # merged into the file
    read_status(run.workdir)                                     # {} when there is none

Fields: state (queued, running, retrying, done, failed, stopped), attempt, node, ip, host, pid,
submitted, started, ended, error, and history (every attempt's outcome, message, node and end).
"""

from __future__ import annotations

import json
import os
import time

from linscale_jax import contract
from linscale_jax.study import files


def status_path(run_workdir) -> str:
    return contract.workdir_file(run_workdir, files.RUN_STATUS)


def read_status(run_workdir) -> dict:
    from etils import epath

    try:
        return json.loads(epath.Path(status_path(run_workdir)).read_text())
    except (OSError, ValueError):
        return {}


def write_status(run_workdir, **fields) -> dict:
    """Merge `fields` into DIR/runs/<run>/status.json (written whole: a rename on local disks)."""
    from etils import epath

    status = {**read_status(run_workdir), **fields}
    path = status_path(run_workdir)
    text = json.dumps(status, indent=1)
    if "://" in path:
        epath.Path(path).write_text(text)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return status


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")

