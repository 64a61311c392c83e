"""Every command answers --help, and user errors are one line with a non-zero exit."""

from __future__ import annotations

import argparse

import pytest

from aitax.cli import build_parser, main


def _all_command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += _all_command_paths(sub, (*prefix, name))
    return paths


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    paths = _all_command_paths(build_parser())
    assert ("stack", "up") in paths
    for path in paths:
        with pytest.raises(SystemExit) as exit_info:
            main([*path, "--help"])
        assert exit_info.value.code == 0
        assert "usage: aitax" in capsys.readouterr().out


def test_bad_broker_count_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "up", "--brokers", "12"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == "aitax: --brokers 12: must be between 3 and 8"
