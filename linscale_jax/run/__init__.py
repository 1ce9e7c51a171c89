"""A run directory: Orbax checkpoints (checkpoint), their checksums (checksums), the run's identity
on resume (identity), the workdir lock (lock), and the checks that combine them before a trainer
touches a workdir (integrity)."""
