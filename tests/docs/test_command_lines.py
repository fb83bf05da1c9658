"""Every `memseal` command line shown in the README and the documentation names a subcommand and
options the installed command has: the docs cannot drift from the command line."""

import functools
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL_FENCE = re.compile(r"^```(?:sh|bash|console)\n(.*?)^```", re.M | re.S)
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def command_lines(text):
    """The memseal command lines of the shell blocks of a page: (line, subcommand, options), with a
    synopsis continued on indented lines joined to its first line."""
    found = []
    for block in SHELL_FENCE.findall(text):
        lines = []
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and lines:
                lines[-1] += " " + line.strip()
            else:
                lines.append(line)
        for line in lines:
            line = re.sub(r"^\$ ", "", line)
            line = re.sub(r"\s+#.*$", "", line)  # a comment after the command
            for part in re.split(r"&&|\|\|", line):
                words = part.split()
                if words[:3] == ["python", "-m", "memseal"]:
                    words = words[2:]
                if not words or words[0] != "memseal":
                    continue
                words = words[1:]
                if "--" in words:  # what follows is the program's own command line
                    words = words[: words.index("--")]
                subcommand = next((w for w in words if not w.startswith(("-", "["))), None)
                if subcommand is not None and not re.fullmatch(r"[a-z]+", subcommand):
                    subcommand = None  # a placeholder or a file, not a subcommand
                options = sorted(set(OPTION.findall(" ".join(words))))
                found.append((part.strip(), subcommand, options))
    return found


CASES = [
    pytest.param(subcommand, options, id=f"{page.relative_to(ROOT)}: {line}"[:160])
    for page in PAGES
    for line, subcommand, options in command_lines(page.read_text())
]


def memseal_command():
    beside = pathlib.Path(sys.executable).with_name("memseal")
    return str(beside) if beside.exists() else shutil.which("memseal")


@functools.lru_cache(maxsize=None)
def help_text(subcommand):
    command = memseal_command()
    if command is None:
        pytest.skip("no memseal command is installed beside this Python")
    argv = [command, *([subcommand] if subcommand else []), "--help"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(argv)} failed: {result.stderr}"
    return result.stdout + result.stderr


def test_the_pages_show_command_lines():
    assert len(CASES) >= 20  # the pages' command lines were found (the parser still reads them)


@pytest.mark.parametrize(("subcommand", "options"), CASES)
def test_a_command_line_of_the_docs_is_one_the_command_takes(subcommand, options):
    text = help_text(subcommand)
    missing = [option for option in options if not re.search(re.escape(option) + r"\b", text)]
    assert not missing, f"memseal {subcommand or ''} --help does not list {missing}"
