"""The optional extras of the install, and the one line for a missing one.

    line = extras.missing_line(e)      # "lm_eval is not installed: ...; pip install ".[eval]" ..." or None
    raise extras.MissingExtra("track", why="train.wandb is set")   # where a command knows why

pyproject.toml declares the extras; EXTRAS maps each to the top-level modules it installs (the
distributions of these extras are named like their modules) and what it is for.
tests/test_extras.py checks the table against pyproject.toml and, with each extra blocked, that a
command needing it prints this line. The accelerator extras ([tpu], [cuda12]) and [test] are not
listed: no command imports them by name.
"""

from __future__ import annotations

from linscale_jax.errors import UserError, chain

EXTRAS = {  # extra -> (its top-level modules, what it is for)
    "eval": (("lm_eval",), "the downstream tasks through lm-evaluation-harness"),
    "interop": (("torch", "transformers", "safetensors"), "Hugging Face and released checkpoints"),
    "notebook": (("nbclient", "nbformat", "ipykernel"), "running notebooks headless"),
    "cluster": (("ray",), "a study's runs on a Ray cluster"),
    "track": (("wandb",), "Weights & Biases tracking"),
}


def install_command(extra: str) -> str:
    """The pip line that adds `extra`, pinned like CI (run in the clone)."""
    return f'pip install ".[{extra}]" -c requirements.txt'


def extra_of(module: str | None) -> str | None:
    """The extra that installs `module` (a dotted name; its top level decides), else None."""
    top = (module or "").split(".")[0]
    return next((extra for extra, (mods, _) in EXTRAS.items() if top in mods), None)


class MissingExtra(UserError, ImportError):
    """A command needs an extra that is not installed: `<module> is not installed (<why>): it comes
    with the [<extra>] extra, for <purpose>; install it ... [, or <instead>]`."""

    def __init__(self, extra: str, why: str = "", module: str = "", instead: str = ""):
        mods, purpose = EXTRAS[extra]
        why = f" ({why})" if why else ""
        instead = f", or {instead}" if instead else ""
        super().__init__(f"{module or mods[0]} is not installed{why}: it comes with the [{extra}] extra, for "
                         f"{purpose}; install it in the clone with `{install_command(extra)}`{instead}.")
        self.extra = extra


def missing_line(e: BaseException) -> str | None:
    """The one line for a module of an extra not found, anywhere in e's chain, else None."""
    for x in chain(e):
        if isinstance(x, MissingExtra):
            return str(x)
        if isinstance(x, ModuleNotFoundError):  # not an installed module failing to import
            extra = extra_of(x.name)
            if extra:
                return str(MissingExtra(extra, module=x.name.split(".")[0]))
    return None
