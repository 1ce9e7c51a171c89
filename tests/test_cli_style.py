"""One CLI style: every entry point's flags are snake_case, the README's command reference lists
each of them, and every documented `python -m ...` invocation (README, docs/, eval/README,
tests/README, the notebook, docstrings) uses only flags its command defines. Read from the
sources; nothing is imported."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ["linscale_jax/parallel/distributed.py"]
ENTRY = {  # command -> the files that define its flags
    "linscale_jax.train": ["linscale_jax/train/cli.py", "linscale_jax/run/command_line.py", *LAUNCH],
    "linscale_jax.models.describe": ["linscale_jax/models/describe.py"],
    "linscale_jax.interop.convert": ["linscale_jax/interop/convert.py"],
    "linscale_jax.data.train_spm": ["linscale_jax/data/train_spm.py"],
    "linscale_jax.data.prepare": ["linscale_jax/data/prepare.py"],
    "linscale_jax.eval": ["linscale_jax/eval/__main__.py"],
    "linscale_jax.eval.export": ["linscale_jax/eval/export.py"],
    "linscale_jax.eval.generate": ["linscale_jax/eval/generate.py"],
    "linscale_jax.fit": ["linscale_jax/fit/cli.py"],
    "linscale_jax.study": ["linscale_jax/study/__main__.py", *LAUNCH],
}
ABSL = {"help", "helpfull", "helpshort", "verbosity", "flagfile"}
FLAG_DEF = re.compile(r'(?:add_argument|DEFINE_\w+)\(\s*"(-{0,2}[\w-]+)"')


def flags_of(command: str) -> set[str]:
    names = set()
    for f in ENTRY[command]:
        names |= {n.lstrip("-") for n in FLAG_DEF.findall((ROOT / f).read_text())}
    assert names, command
    return names


def reference_rows() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Command reference", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `python -m ([\w.]+)` \|(.*)\|$", section, re.M)}


@pytest.mark.parametrize("command", sorted(ENTRY))
def test_flags_are_snake_case_and_in_the_reference(command):
    names = flags_of(command)
    assert not [n for n in names if "-" in n], f"{command}: use underscores in flag names"
    row = reference_rows().get(command)
    assert row is not None, f"README command reference has no row for python -m {command}"
    missing = sorted(n for n in names if f"--{n}" not in row
                     and not (n in {"coordinator_address", "num_processes", "process_id", "peer_timeout"}
                              and "launch flags" in row))
    assert not missing, f"README reference row for {command} lacks {missing}"


def _documents():
    yield from (ROOT / p for p in ("README.md", "linscale_jax/eval/README.md", "tests/README.md", "notebooks/explore.ipynb"))
    yield from (ROOT / "docs").glob("*.md")
    for pkg in ("linscale_jax", "eval", "fit", "study"):
        yield from (ROOT / pkg).rglob("*.py")


def _invocations(line: str):
    """(command, the text its flags are read from) for each `python -m X` of a line: the rest of the
    line up to the next invocation; inside an inline code span that holds more than the command,
    only up to the span's end (what follows is prose or a quoted message, not its flags)."""
    matches = list(re.finditer(r"python -m ([\w.]+)", line))
    for i, m in enumerate(matches):
        rest = line[m.end():matches[i + 1].start() if i + 1 < len(matches) else len(line)]
        if line[:m.start()].count("`") % 2 and "`" in rest and not rest.startswith("`"):
            rest = rest[:rest.index("`")]
        yield m.group(1), rest


def test_invocation_flags_end_with_their_code_span():
    assert list(_invocations("| `python -m linscale_jax.fit --table=x` | 1 | `ERROR: pass --out` |")) == [("linscale_jax.fit", " --table=x")]
    assert list(_invocations("| `python -m linscale_jax.fit` | `--table=FILE`, `--bogus` |")) == [("linscale_jax.fit", "` | `--table=FILE`, `--bogus` |")]
    assert list(_invocations("python -m linscale_jax.eval --steps=last && python -m linscale_jax.fit --out=d")) == [
        ("linscale_jax.eval", " --steps=last && "), ("linscale_jax.fit", " --out=d")]


def test_documented_invocations_use_defined_flags():
    known = {c: flags_of(c) | ABSL for c in ENTRY}
    bad = []
    for path in _documents():
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for command, rest in _invocations(line):
                if command not in known:
                    continue
                for flag in re.findall(r"(?<![\w-])--([\w.-]+)", rest):
                    name = flag[2:] if flag.startswith("no") and flag[2:] in known[command] else flag
                    if not name.startswith("config.") and name not in known[command]:
                        bad.append(f"{path.relative_to(ROOT)}:{lineno}: python -m {command} --{flag}")
    assert not bad, "unknown or old-style flags:\n" + "\n".join(bad)
