"""Stack-changing commands take turns: a second `down`/`up` waits while another command holds the stack."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from stack import stack

HOLD_S = 2.0


def test_a_second_command_waits_for_the_one_changing_the_stack(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    lock_file = tmp_path / "stack" / ".lock"
    lock_file.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"f = open({str(lock_file)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(float(sys.argv[1]))\n"), str(HOLD_S)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        said: list[str] = []
        started = time.monotonic()
        assert stack.down(progress=said.append) == 0  # nothing runs here: it only had to wait its turn
        waited = time.monotonic() - started
    finally:
        holder.wait(10)
    assert said == [f"another aitax command is changing the stack in {tmp_path / 'stack'}; waiting for it ..."]
    assert waited >= HOLD_S / 2  # released only when the holder exited
    # Free again: no waiting, no message.
    said.clear()
    assert stack.down(progress=said.append) == 0 and said == []
