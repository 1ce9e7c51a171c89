"""The project's one error base (stdlib only, so every layer, `fit` included, can derive from it).

    class DataError(UserError, ValueError): ...      # bad input the user can fix
    class WorkdirLockedError(Refusal, RuntimeError): ...

Every user-facing error class derives from `UserError`; its message is the line the commands print
(`ERROR: <problem>; <fix>`, linscale_jax.cli_errors). A `Refusal` is raised before the command
touched anything: no log file is written, so the workdir stays byte-identical.
"""


class UserError(Exception):
    """Bad input, a bad environment or an impossible request; str(e) names the problem and the fix."""


class Stopped(UserError):
    """A clean stop by a signal (SIGTERM, Ctrl-C) after everything was saved: the command prints
    str(e), one line saying what was saved and how to resume, and exits 0."""


class Refusal(UserError):
    """A command refused before it changed anything (another trainer holds the workdir, a config
    that would change the run, ...)."""
