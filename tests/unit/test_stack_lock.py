"""Stack-changing commands take turns: a second `down`/`up` waits while another command holds the stack."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aitax.stack import stack
from tests.locks import held_elsewhere

HOLD_S = 2.0


def test_a_second_command_waits_for_the_one_changing_the_stack(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    lock_file = tmp_path / "stack" / ".lock"
    lock_file.parent.mkdir(parents=True)
    with held_elsewhere(lock_file, HOLD_S):
        said: list[str] = []
        started = time.monotonic()
        assert stack.down(progress=said.append) == 0  # nothing runs here: it only had to wait its turn
        waited = time.monotonic() - started
    assert said == [f"another aitax command is changing the stack in {tmp_path / 'stack'}; waiting for it ..."]
    assert waited >= HOLD_S / 2  # released only when the holder exited
    # Free again: no waiting, no message.
    said.clear()
    assert stack.down(progress=said.append) == 0 and said == []
