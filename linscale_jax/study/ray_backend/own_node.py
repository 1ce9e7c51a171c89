"""The driver's own side of a study on Ray (study.ray_backend): its node's raylet and the control
actor. Their loss ends the study in one line; every run's checkpoints and eval rows are kept.

    own = OwnSide(ray, control, local=started_here)
    own.check()                            # DriverLost once the local Ray's raylet has died
    with own.guard():                      # a Ray error of the driver's calls -> DriverLost
        events, beats = ray.get(ready_drain_ref)
    own.waited(seconds, log)               # the control actor's answer outstanding that long

Ray fate-shares a node's agents with its raylet and the raylet's workers with it: a killed agent
or raylet (a kill, the OOM killer, a crash) ends the node, the run tasks on it and, on the head
node, the control actor. Worker nodes other than the driver's are the driver's retry path
(study.ray_backend.outcomes); the driver's own node is not: it says what was lost and that a re-run
resumes, and exits 1. The runs' status files say "lost" until the re-run. An actor that answers
late is not lost: the driver says so once after CONTROL_WARN_S and waits on, up to
CONTROL_PATIENCE_S (study.ray_backend.control).
"""

from __future__ import annotations

import contextlib
import signal

from linscale_jax.study.ray_backend.cluster import ClusterError
from linscale_jax.study.ray_backend.control import CONTROL_PATIENCE_S, CONTROL_WARN_S
RERUN = ("the runs under way ended with it; their checkpoints and eval rows so far are kept: re-run "
         "the same command and every run resumes from its newest checkpoint")


class DriverLost(ClusterError):
    """The driver's node, its raylet or the control actor was lost (message: what, and the re-run)."""


class OwnSide:
    """The driver's raylet (when this process started the local Ray) and its control actor."""

    def __init__(self, ray, control, local: bool):
        self.ray, self.control, self.raylet = ray, control, _local_raylet(ray) if local else None
        self.ip = ray.util.get_node_ip_address()
        self.warned = False

    def check(self) -> None:
        """DriverLost once the local Ray's raylet (this process started it) has exited."""
        if self.raylet is not None and self.raylet.poll() is not None:
            rc = self.raylet.returncode
            how = f"was killed by {_signal_name(-rc)}" if rc < 0 else f"exited with status {rc}"
            raise DriverLost(f"the Ray node on {self.ip} that runs this study's driver was lost: its "
                             f"raylet (pid {self.raylet.pid}) {how} (a killed agent or raylet, the OOM "
                             f"killer); {RERUN}")

    def waited(self, seconds: float, log) -> None:
        """The control actor has not answered a call for `seconds`: one line after CONTROL_WARN_S
        (the driver waits on), DriverLost after CONTROL_PATIENCE_S."""
        if seconds > CONTROL_PATIENCE_S:
            self.check()
            raise DriverLost(f"the study's control actor on the head node answered nothing for "
                             f"{seconds:.0f}s; {RERUN}")
        if seconds > CONTROL_WARN_S and not self.warned:
            self.warned = True
            log(f"[study] the control actor has not answered for {seconds:.0f}s (a loaded head node?); "
                f"waiting up to {CONTROL_PATIENCE_S:.0f}s: start lines and heartbeats wait for it, the "
                "runs go on")

    @contextlib.contextmanager
    def guard(self):
        """Ray's errors in the driver's own calls (the control actor, submission, waiting): the
        driver's side is lost (DriverLost, after check() has had its say)."""
        try:
            yield
        except self.ray.exceptions.RayError as e:
            self.check()
            kind = type(e).__name__
            first = (str(e).strip().splitlines() or [kind])[0][:240]
            raise DriverLost(f"the study's control actor or the driver's node on {self.ip} was lost "
                             f"({kind}: {first}); {RERUN}") from e


def _local_raylet(ray):
    """The raylet process (subprocess.Popen) of the Ray this process started, or None."""
    node = getattr(getattr(ray, "_private", None), "worker", None)
    node = getattr(node, "_global_node", None)
    procs = getattr(node, "all_processes", {}).get("raylet") or []
    return getattr(procs[0], "process", None) if procs else None


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"
