"""Every command that needs the local stack, run while it is down: one line naming what is missing, exit 2.

The stack here was started once (its description is on disk) but nothing listens on its ports, as after a
reboot or `kill`; and, for a few commands, no stack was ever started. No stack is started by these tests.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from aitax.stack.config import StackConfig

UNUSED_PORT_BASE = 31700  # nothing of this project's listens there (CI uses 25000, developers 19000)

COMMANDS = {
    "emulate": (["emulate", "--factors", "1", "--duration", "5", "--warmup", "0"], "`aitax stack up`"),
    "emulate-scaling": (["emulate-scaling", "brokers", "--values", "3"], "`aitax stack up`"),
    "faults": (["faults", "--scenarios", "broker-kill"], "`aitax stack up`"),
    "emulate-producers": (["emulate-producers", "--duration", "1"], "unreachable"),
    "emulate-consumers": (["emulate-consumers"], "unreachable"),
    "report": (["report", "--run", "r1"], "Elasticsearch at https://127.0.0.1:31900 unreachable"),
    "report --es": (["report", "--run", "r1", "--es", "https://127.0.0.1:31901"],
                    "https://127.0.0.1:31901 unreachable"),
    "profile": (["profile", "--run", "r1", "--out", "p.yaml"], "unreachable"),
    "audit": (["audit", "--run-id", "r1"], "unreachable"),
}


def _run(argv: list[str], home, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "AITAX_HOME": str(home), "AITAX_PORT_BASE": str(UNUSED_PORT_BASE)}
    env.pop("AITAX_BOOTSTRAP", None)
    env.pop("AITAX_EVENTS", None)
    return subprocess.run([sys.executable, "-m", "aitax.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_stopped_stack_is_one_line_and_exit_2(name: str, tmp_path) -> None:
    home = tmp_path / "home"
    StackConfig(port_base=UNUSED_PORT_BASE).save(home / "stack" / "stack.json")
    argv, expected = COMMANDS[name]
    result = _run(argv, home, tmp_path)
    output = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 2, output[-5:]
    assert len(output) == 1, output[:5]
    assert output[0].startswith("aitax: ") and expected in output[0], output[0]


@pytest.mark.parametrize("argv", [["emulate", "--factors", "1", "--warmup", "0"], ["faults"], ["report", "--run", "r"]])
def test_a_stack_never_started_is_one_line_and_exit_2(argv: list[str], tmp_path) -> None:
    result = _run(argv, tmp_path / "empty", tmp_path)
    output = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 2 and len(output) == 1 and "aitax stack up" in output[0], output[:5]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--producers", "0"], "--producers 0: input should be greater than or equal to 1"),
    (["--duration", "-1"], "--duration -1.0: input should be greater than 0"),
])
def test_bad_run_options_are_named_before_the_stack_is_looked_for(argv: list[str], expected: str, tmp_path) -> None:
    result = _run(["run", "--video", "v.mp4", "--gallery", "g.npz", *argv], tmp_path / "empty", tmp_path)
    output = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 2 and output == [f"aitax: {expected}"], output[:5]
