"""A command's config file: a bare name is a file shipped in the package, anything else a path.

    resolve("tiny")                           -> .../linscale_jax/configs/tiny.py
    resolve("cpu", "study")                   -> .../linscale_jax/configs/study/cpu.py
    resolve("recall_rates", "study", ".json") -> .../linscale_jax/configs/study/recall_rates.json
    resolve("configs/tiny.py")                -> "configs/tiny.py" (a path, as given)
    argv = resolve_argv(sys.argv, "study")    # --config=cpu[:ARG] -> the packaged file[:ARG]
    argv = command_argv(sys.argv, "study")    # the same; a missing name: one line, exit status 2
    config = load("ladder", "tnl-d64")        # the file's get_config("tnl-d64")

A bare name has no path separator and no suffix; it names linscale_jax/configs/[<folder>/]<name>
read through importlib.resources, so it works the same from a clone, an editable install and a
wheel, from any working directory. The packaged names are listed in the error for one that is not
there.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
from pathlib import Path


def is_name(value: str) -> bool:
    """True for a bare name (no path separator, no suffix): a packaged file."""
    value = str(value)
    return bool(value) and "/" not in value and os.sep not in value and not Path(value).suffix


def packaged(folder: str = "", suffix: str = ".py") -> list[str]:
    """The names of the files shipped in linscale_jax/configs/<folder> with `suffix`."""
    root = importlib.resources.files("linscale_jax").joinpath("configs", *filter(None, [folder]))
    return sorted(p.name[:-len(suffix)] for p in root.iterdir() if p.name.endswith(suffix)
                  and not p.name.startswith("_"))


def resolve(value: str, folder: str = "", suffix: str = ".py") -> str:
    """The file a config value names (module docstring); a missing packaged name is a
    FileNotFoundError listing the names there are."""
    value = str(value)
    if not is_name(value):
        return value
    path = importlib.resources.files("linscale_jax").joinpath("configs", *filter(None, [folder]), value + suffix)
    if not path.is_file():
        where = f"linscale_jax/configs/{folder + '/' if folder else ''}"
        raise FileNotFoundError(f"no packaged config {value!r} in {where} (there are: "
                                f"{', '.join(packaged(folder, suffix))}); give one of those or a path to a file")
    return str(path)


def resolve_argv(argv: list[str], folder: str = "", flag: str = "config") -> list[str]:
    """argv with --<flag>=NAME[:ARG] (or --<flag> NAME[:ARG]) turned into the packaged file's path;
    paths are left as they are."""
    out, i = list(argv), 1
    while i < len(out):
        arg = out[i]
        if arg == f"--{flag}" and i + 1 < len(out):
            i += 1
            out[i] = _resolve_value(out[i], folder)
        elif arg.startswith(f"--{flag}="):
            out[i] = f"--{flag}=" + _resolve_value(arg.split("=", 1)[1], folder)
        i += 1
    return out


def command_argv(argv: list[str], folder: str = "") -> list[str]:
    """resolve_argv for a command's entry point: a packaged name that is not there is the
    commands' one-line usage error (exit status 2)."""
    try:
        return resolve_argv(argv, folder)
    except FileNotFoundError as e:
        from linscale_jax import console

        console.print_error(f"bad command line: {e}")
        raise SystemExit(2) from None


def _resolve_value(value: str, folder: str) -> str:
    name, sep, arg = value.partition(":")
    return resolve(name, folder) + sep + arg if is_name(name) else value


def load(value: str, arg: str | None = None, folder: str = ""):
    """The get_config(arg) of the config file `value` names (get_config() without an arg)."""
    path = resolve(value, folder)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file {value!r} not found; give a packaged name (e.g. ladder, "
                                "tiny) or a path to a file")
    spec = importlib.util.spec_from_file_location(f"_config_{Path(path).stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config() if arg is None else mod.get_config(arg)
