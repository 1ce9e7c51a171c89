"""What became of one attempt of a run on Ray (study.ray_backend): each host task's outcome, and
the run's verdict from its hosts'.

    lost     the run's worker process, node or slice was lost (Ray's LOST errors, a SIGTERM the
             driver did not send: a preemption): the driver resubmits it
    failed   the run's own error, or a Ray error outside LOST: not retried
    stopped  the driver's stop: the run saved and stopped
    done
"""

from __future__ import annotations

import dataclasses

# Ray errors that mean the run's process, node or slice was lost (retried); RayTaskError (the run's
# own exception outside its handler), RuntimeEnvSetupError and TaskUnschedulableError are not.
LOST = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError",
        "ObjectLostError", "OwnerDiedError", "ObjectReconstructionFailedError", "RaySystemError",
        "TaskPlacementGroupRemoved", "ActorDiedError")


@dataclasses.dataclass
class Attempt:
    """One submission of a run: one task per host (`refs`), a gang's placement group (`pg`), the
    outcomes of the hosts that have ended or were declared lost, the hosts whose task has returned
    (`resolved`), each host's last heartbeat and the processes a teardown saw gone
    (study.ray_backend.gang)."""
    run: object
    number: int
    refs: list
    pg: object = None
    outcomes: dict = dataclasses.field(default_factory=dict)  # host -> outcome
    resolved: set = dataclasses.field(default_factory=set)  # hosts whose task's result is in
    beats: dict = dataclasses.field(default_factory=dict)  # host -> (seconds since its beat, info)
    gone: set = dataclasses.field(default_factory=set)  # (hostname, pid) of processes seen ended


def outcome(ray, ref) -> dict:
    """One host task's outcome: host_task's dict, or one made from Ray's error (cancelled; lost for
    the LOST errors; failed for the run's exception outside host_task's handler and the others)."""
    try:
        return ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return dict(state="cancelled")
    except ray.exceptions.RayTaskError as e:  # raised outside host_task's handler
        return dict(state="failed", message=f"{type(e.cause).__name__}: {str(e.cause).strip().splitlines()[0]}"
                    if e.cause else str(e).splitlines()[0])
    except ray.exceptions.RayError as e:
        kind = type(e).__name__
        lost = kind in LOST or any(c.__name__ in LOST for c in type(e).__mro__)
        return dict(state="lost" if lost else "failed", message=f"{kind}: {str(e).strip().splitlines()[0][:200]}")


def verdict(outcomes: list[dict], stopping: bool) -> tuple[str, str]:
    """A gang's (or a single task's) state from its hosts' outcomes, and the message."""
    states = [o.get("state") for o in outcomes]
    first = lambda s: next((o.get("message", "") for o in outcomes if o.get("state") == s), "")  # noqa: E731
    if "lost" in states:
        return "lost", first("lost")
    if "failed" in states:
        return "failed", first("failed")
    if "stopped" in states or "cancelled" in states:
        # a stop the driver did not ask for is a preemption (the node's SIGTERM): retried
        return ("stopped", first("stopped")) if stopping else ("lost", f"preempted ({first('stopped')})")
    return "done", ""
