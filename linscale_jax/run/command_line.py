"""The command line of the absl commands (train, describe, study): help, config fields, one-line errors.

    app.run(main, flags_parser=command_line.parser(__doc__, _CONFIG))

--help (also -h, --helpshort; --helpfull adds every library's flags) prints the command's purpose
(its docstring), its flags with their defaults and where the config fields are, and exits 0.
--config_help prints every field of the --config file (command-line overrides applied) with its
value and, where linscale_jax/config.py or ModelConfig documents it, what it means; it needs no
other flag and exits 0.
A config file that does not exist or does not load (a syntax error, an exception in get_config, a
bad argument after ':') is one line naming the file, the cause and where it stopped; a bad flag or
override is one line too. Both exit with status 2, as argparse commands do.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from importlib import resources

from absl import flags

from linscale_jax import console
from linscale_jax.run import config_file

HELP = ("--help", "-h", "-?", "--helpshort", "--helpfull")
_CONFIG_HELP = flags.DEFINE_bool("config_help", False, "Print the fields of the --config file with their "
                                 "values (overrides applied) and exit.")
_NOTE_FILES = (  # where fields are documented: file, section, from, to
    ("config.py", None, "def base_config", "return c"),
    ("models/config.py", "model", "class ModelConfig", "    def "))


def parser(doc: str, config=None, folder: str = ""):
    """A flags_parser for absl's app.run (module docstring); config: the DEFINE_config_file holder,
    folder: where under linscale_jax/configs its packaged names are (linscale_jax.run.config_file)."""

    def parse(argv):
        args = list(argv[1:])
        if any(a in HELP for a in args):
            print(help_text(doc, full="--helpfull" in args), flush=True)
            sys.exit(0)
        spec = config_spec(args, config)
        if spec:
            missing = missing_file(spec, folder)
            if missing:
                fail(missing)
        asked = any(a in ("--config_help", "--config_help=true", "--config_help=True") for a in args)
        try:
            rest = flags.FLAGS(argv)
        except Exception as e:  # noqa: BLE001 - flags.Error, a config file's own exception, an override's
            required_only = isinstance(e, flags.IllegalFlagValueError) and "value other than None" in str(e)
            if not (asked and required_only and config is not None and flags.FLAGS["config"].present):
                fail(error_line(e, spec, args))
            rest = argv[:1]
        if _CONFIG_HELP.value or asked:
            if config is None:
                fail("bad command line: --config_help needs a command with --config; see --help.")
            print(fields_text(config.value, spec), flush=True)
            sys.exit(0)
        return rest

    return parse


def fail(line: str) -> None:
    console.print_error(line)
    sys.exit(2)


def config_spec(args: list[str], config) -> str | None:
    """The --config value of the command line (FILE[:ARG]), else the flag's default."""
    for i, a in enumerate(args):
        if a.startswith("--config="):
            return a.split("=", 1)[1]
        if a == "--config" and i + 1 < len(args):
            return args[i + 1]
    default = flags.FLAGS["config"].default if config is not None else None
    return default if isinstance(default, str) else None


def shipped_configs() -> str:
    """The directory of the package's config files (linscale_jax/configs)."""
    return str(resources.files("linscale_jax") / "configs")


def missing_file(spec: str, folder: str = "") -> str | None:
    """The line for a config path that is not a readable file, else None."""
    path = spec.split(":", 1)[0]
    cause = ("is a directory" if os.path.isdir(path) else "does not exist" if not os.path.exists(path)
             else None if os.access(path, os.R_OK) else "cannot be read (permission denied)")
    if cause is None:
        return None
    where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()})"
    names = config_file.packaged(folder)
    example = "tiny" if "tiny" in names else (names or ["NAME"])[0]
    return (f"config file {path} {cause}{where}; pass a packaged config by name ({', '.join(names)}: "
            f"--config={example}[:ARG]) or the path of a .py file "
            f"(the packaged ones are in {shipped_configs()}{'/' + folder if folder else ''}).")


def error_line(e: BaseException, spec: str | None, args: list[str] = ()) -> str:
    """One line for a failed parse: the config file that did not load, or the bad flag."""
    text = str(e).replace("\\n", "\n").replace("\\'", "'")
    path = spec.split(":", 1)[0] if spec else None
    if path and _from_config_file(e, text, path):
        lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
        cause = lines[-1] if "Traceback" in text or "Error whilst parsing" in text else \
            f"{type(e).__name__}: {lines[-1] if lines else ''}"
        if isinstance(e, SyntaxError):
            cause = f"SyntaxError: {e.msg}"
        return (f"config file {spec} did not load{_config_line(e, text, path)}: {cause.rstrip('.')}; fix "
                f"the file or its argument after ':' (`--config={path} --config_help` lists its fields "
                "once it loads).")
    if isinstance(e, (AttributeError, KeyError)):  # an override naming no field
        key = text.strip().splitlines()[0].strip("'\"")
        flag = next((a.split("=", 1)[0] for a in args if a.startswith("--config.")
                     and key in a.split("=", 1)[0].split(".")[1:]), None)
        hint = re.search(r'Did you mean "([^"]+)"', text)
        if flag:
            return (f"bad command line: {flag} names no config field"
                    f"{f' (did you mean {hint.group(1)}?)' if hint else ''}; `--config={spec} --config_help` "
                    "lists the fields.")
    text = " ".join(text.strip().splitlines()[-1:] if "Traceback" in text else text.split())
    text = text.replace("'", "").rstrip(".")
    return (f"bad command line: {text}; see --help for the flags and `--config=FILE --config_help` for "
            "the config fields.")


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _from_config_file(e: BaseException, text: str, path: str) -> bool:
    if "Error whilst parsing config file" in text or "earlier failure to load" in text:
        return True
    if isinstance(e, SyntaxError) and e.filename and _same(e.filename, path):
        return True
    return any(_same(f.filename, path) for f in traceback.extract_tb(e.__traceback__))


def _config_line(e: BaseException, text: str, path: str) -> str:
    """' (line N)': the deepest line of the config file in the failure, else ''."""
    if isinstance(e, SyntaxError) and e.lineno:
        return f" (line {e.lineno})"
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if _same(f.filename, path)]
    lines += [int(n) for f, n in re.findall(r'File "([^"]+)", line (\d+)', text) if _same(f, path)]
    return f" (line {lines[-1]})" if lines else ""


def help_text(doc: str, full: bool = False) -> str:
    """The command's docstring, its flags (and with full, every module's) and the config fields."""
    own = {m: fl for m, fl in flags.FLAGS.flags_by_module_dict().items()
           if m.startswith(("linscale_jax", "kernels_pallas")) or m == "__main__"}
    parts = [doc.strip(), "", "Flags:"]
    for module in sorted(own):
        parts.append(flags.FLAGS.module_help(module).split("\n", 1)[-1])
    if any(fl.name == "config" for fls in own.values() for fl in fls):
        parts += ["", "Config fields: `--config=FILE[:ARG] --config_help` lists every field of FILE with its "
                  "value; override one with --config.<section>.<field>=VALUE. What they mean: "
                  "linscale_jax/config.py (train, optim, data, checkpoint, mesh) and "
                  "linscale_jax/models/config.py (model); the shipped config files: " + shipped_configs()]
    if full:
        parts += ["", "Every flag, libraries' included:", flags.FLAGS.get_help()]
    return "\n".join(parts)


def field_notes() -> dict[str, str]:
    """{dotted field, and bare field name: its note}, read from the comments beside the defaults in
    linscale_jax/config.py's base_config (per section) and in ModelConfig's fields (model.<field>)."""
    notes: dict[str, str] = {}
    root = resources.files("linscale_jax")
    for name, section, start, stop in _NOTE_FILES:
        text = (root / name).read_text()
        body = text[text.index(start):]
        body = body[:body.index(stop)] if stop in body else body
        pending, last = [], None
        for line in body.splitlines():
            m = re.match(r"\s*c\.(\w+) = ", line)
            if m and name == "config.py":
                section = m.group(1)
            field = re.match(r"\s+(\w+)(?:=|: [\w\[\], |.]+ = ).*?(?:#\s*(.*))?$", line)
            comment = re.match(r"\s*#(\s*)(.*)$", line)
            if field and section:
                last = f"{section}.{field.group(1)}"
                note = field.group(2) or " ".join(pending)
                if note:
                    notes[last] = note
                    notes.setdefault(field.group(1), note)
                pending = []
            elif comment and len(comment.group(1)) > 1 and last in notes:  # the line above, continued
                notes[last] += " " + comment.group(2)
            elif comment:
                pending.append(comment.group(2))
            else:
                pending, last = [], None
    return notes


def _flat(cfg, prefix: str = ""):
    for key in sorted(cfg.keys()) if hasattr(cfg, "keys") else []:
        value = cfg[key]
        if hasattr(value, "keys") and not isinstance(value, str):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def fields_text(cfg, spec: str | None) -> str:
    """Every field of a loaded config: `section.field = value  # note`."""
    notes = field_notes()
    rows = list(_flat(cfg))
    width = max((len(f"{k} = {v!r}") for k, v in rows), default=0)
    out = [f"Fields of --config={spec} (command-line overrides applied); override any with "
           "--config.<field>=VALUE:"]
    for key, value in rows:
        note = notes.get(key) or notes.get(key.rsplit(".", 1)[-1], "")
        left = f"{key} = {value!r}"
        out.append(f"  {left:<{min(width, 48)}}  # {note}" if note else f"  {left}")
    return "\n".join(out)
