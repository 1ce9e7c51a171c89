"""The project's one error base (stdlib only, so every layer, `fit` included, can derive from it).

    class DataError(UserError, ValueError): ...      # bad input the user can fix
    class WorkdirLockedError(Refusal, RuntimeError): ...

Every user-facing error class derives from `UserError`; its message is the line the commands print
(`ERROR: <problem>; <fix>`, linscale_jax.run.command). A `Refusal` is raised before the command
touched anything: its log goes outside the workdir, so the workdir stays byte-identical.
`ArgumentParser` gives argparse commands the same style for a bad command line (exit status 2).
"""

import argparse
import sys


class UserError(Exception):
    """Bad input, a bad environment or an impossible request; str(e) names the problem and the fix."""


class Stopped(UserError):
    """A clean stop by a signal (SIGTERM, Ctrl-C) after everything was saved: the command prints
    str(e), one line saying what was saved and how to resume, and exits 0."""


class Refusal(UserError):
    """A command refused before it changed anything (another trainer holds the workdir, a config
    that would change the run, ...)."""


def chain(e: BaseException):
    """e, then its causes and contexts (each once): where a wrapped failure is found."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the commands' one-line usage error: `ERROR: bad command line: ...`, rc 2."""

    def error(self, message):
        sys.stdout.flush()
        print(f"ERROR: bad command line: {message}; see `{self.prog} --help` for the flags.",
              file=sys.stderr, flush=True)
        sys.exit(2)
