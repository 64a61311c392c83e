"""Every command answers --help, and a bad option value or user error is one line with a non-zero exit."""

from __future__ import annotations

import pytest

from aitax.cli import main
from tests.command_line import command_paths, find


def test_every_command_and_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    paths = list(command_paths())
    assert ("stack", "up") in paths and len(paths) > 50
    for path in paths:
        assert main([*path, "--help"]) == 0
        assert f"Usage: aitax {' '.join(path)}".rstrip() in capsys.readouterr().out
        for param in find(path).params:
            if param.param_type_name == "option":
                assert param.help, f"aitax {' '.join(path)} {param.opts[0]}: no help"


def test_commands_are_listed_in_the_order_a_frame_flows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.split("Commands:")[1].splitlines() if line.strip()]
    assert listed.index("stack") < listed.index("ingest-detect") < listed.index("identify") < listed.index("report")


def test_a_bad_option_value_is_one_line_naming_the_command_and_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "up", "--brokers", "three"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error
    assert error.startswith("aitax stack up: Invalid value for '--brokers': 'three'")


def test_an_unknown_option_or_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "up", "--broker", "3"]) == 2
    assert main(["stak"]) == 2
    first, second = capsys.readouterr().err.strip().splitlines()
    assert first.startswith("aitax stack up: No such option '--broker'")
    assert second.startswith("aitax: No such command 'stak'")


def test_bad_broker_count_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "up", "--brokers", "12"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == "aitax: --brokers 12: must be between 3 and 8"


def test_a_group_without_an_action_prints_its_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack"]) == 2
    assert "kill-broker" in capsys.readouterr().out
