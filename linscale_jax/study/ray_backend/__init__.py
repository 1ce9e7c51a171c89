"""A study's runs as Ray tasks, on this machine or on a cluster (python -m linscale_jax.study --backend=ray).

    from linscale_jax.study import ray_backend
    out = ray_backend.run(study, runs, finals, process=runner.process_run, workdir=DIR, address=None,
                          log=print, eta=runner.eta_seconds)  # {"failed", "stopped", "signal", "slots"}

The [cluster] extra (Ray), imported only when a run is asked for. One run is one unit of work,
`runner.process_run` (train or resume, evaluate, cooldowns), in a fresh worker process (max_calls=1:
libtpu and jax.distributed start once per process). DIR must be the same directory on every node.

  cluster    a local Ray on 127.0.0.1 only, or a running cluster attached to (connect)
  placement  what a run asks for: CPU, GPU, single-host TPU, a multi-host gang (placement, slots)
  storage    every node alive sees DIR (check_storage)
  status     DIR/runs/<run>/status.json: state, attempt, node, host, pid, times, every outcome
  control    the driver's mailbox, an actor: the stop request, start events, coordinator addresses,
             the host tasks' heartbeats
  task       one host of one run inside its worker process (host_task)
  outcomes   a host task's outcome (lost: retried; failed; stopped; done) and a gang's verdict
  gang       the heartbeat deadline on a silent host; an attempt torn down whole (kill by pid, lock)
  driver     submission longest first, retries, stop handling, start/finish/ETA lines (run)
"""

from linscale_jax.study.ray_backend.driver import run

__all__ = ["run"]
