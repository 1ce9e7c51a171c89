"""A run directory: Orbax checkpoints (checkpoint), their checksums (checksums), the run's identity
on resume (identity), the workdir lock and who may remove a workdir (lock), and the checks that
combine them before a trainer touches a workdir (integrity); and how a command runs: one line per
failure (command, storage), one stop however many signals (signals)."""
