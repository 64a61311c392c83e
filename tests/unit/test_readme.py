"""The README is a front door: short, and every command it shows runs as written (the `aitax` ones parse with the
real command line, the `make` ones are targets, the scripts exist)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import click
import pytest

from aitax.common.paths import PROJECT_ROOT
from tests.command_line import parse

README = PROJECT_ROOT / "README.md"
MAX_BYTES = 10_000


def _commands() -> list[str]:
    """Lines of the code blocks and inline code spans that start with a command, comments removed."""
    text = README.read_text()
    blocks = re.findall(r"```(?:bash)?\n(.*?)```", text, flags=re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    lines += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    commands = [line.split("#", 1)[0].strip() for line in lines]
    return [c for c in commands if c.split(" ", 1)[0] in ("aitax", "make", ".venv/bin/python")]


def test_the_readme_is_at_most_10_kb() -> None:
    assert len(README.read_bytes()) <= MAX_BYTES


def test_the_readme_shows_commands() -> None:
    assert {"make demo", "make test"} <= set(_commands())


@pytest.mark.parametrize("command", _commands())
def test_every_command_in_the_readme_runs_as_written(command: str) -> None:
    program, *args = shlex.split(command)
    if program == "make":
        targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (PROJECT_ROOT / "Makefile").read_text(), flags=re.M))
        assert set(args) <= targets, f"{command}: no such make target"
    elif program == ".venv/bin/python":
        assert (PROJECT_ROOT / args[0]).is_file(), f"{command}: no such script"
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                parse(args)
            except click.exceptions.Exit as exit_:  # --help
                assert exit_.exit_code == 0, command
            except click.UsageError as error:
                pytest.fail(f"{command}: {error.format_message()}")
