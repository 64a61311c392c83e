"""ManagedProcess's PID-file guard: a process is ours only if its command line carries the marker, and a process
still inside execve (empty command line for a moment) is not mistaken for a stranger."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from aitax.common import daemons as procs
from aitax.common.daemons import ManagedProcess
from aitax.common.errors import UserError


def _managed(tmp_path: Path, marker: str) -> ManagedProcess:
    return ManagedProcess(name="t", pid_file=tmp_path / "t.pid", log_file=tmp_path / "t.log", cmdline_marker=marker)


def test_a_process_is_ours_only_with_the_marker(tmp_path: Path) -> None:
    (tmp_path / "t.pid").write_text(f"{os.getpid()}\n")
    assert _managed(tmp_path, " ".join(psutil.Process().cmdline())).pid() == os.getpid()
    assert _managed(tmp_path, "no-such-marker-in-any-command-line").pid() is None
    (tmp_path / "t.pid").write_text("not a pid\n")
    assert _managed(tmp_path, sys.executable).pid() is None


class _ExecingProcess:
    """psutil.Process of a child caught inside execve: an empty command line for its first reads."""

    empty_reads = 3

    age_s = 0.0

    def __init__(self, pid: int) -> None:
        self.reads = 0
        self.started = time.time() - self.age_s

    def create_time(self) -> float:
        return self.started

    def status(self) -> str:
        return psutil.STATUS_DISK_SLEEP

    def cmdline(self) -> list[str]:
        self.reads += 1
        return [] if self.reads <= self.empty_reads else ["/opt/bin/etcd", "--data-dir=/state/k8s/etcd"]


def test_an_empty_command_line_mid_exec_is_waited_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.pid").write_text("4242\n")
    monkeypatch.setattr(procs.psutil, "Process", _ExecingProcess)
    assert _managed(tmp_path, "/state/k8s").pid() == 4242


def test_a_command_line_that_stays_empty_is_not_ours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.pid").write_text("4242\n")
    monkeypatch.setattr(_ExecingProcess, "empty_reads", 10**9)
    monkeypatch.setattr(procs.psutil, "Process", _ExecingProcess)
    monkeypatch.setattr(procs, "EXEC_GRACE_S", 0.2)
    assert _managed(tmp_path, "/state/k8s").pid() is None


def test_an_old_process_without_a_command_line_is_refused_at_once(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel thread that reused a stale PID: no waiting, it is not ours."""
    (tmp_path / "t.pid").write_text("4242\n")
    monkeypatch.setattr(_ExecingProcess, "empty_reads", 10**9)
    monkeypatch.setattr(_ExecingProcess, "age_s", 3600.0)
    monkeypatch.setattr(procs.psutil, "Process", _ExecingProcess)
    started = time.monotonic()
    assert _managed(tmp_path, "/state/k8s").pid() is None
    assert time.monotonic() - started < procs.EXEC_GRACE_S / 2


def test_poll_until_returns_the_first_true_value_or_the_last_false_one_at_the_deadline() -> None:
    answers = iter([0, None, 7, 8])
    assert procs.poll_until(lambda: next(answers), 5, interval_s=0.01) == 7  # stops at the first true value
    calls = []
    started = time.monotonic()
    assert procs.poll_until(lambda: calls.append(1) or 0, 0.2, interval_s=0.05) == 0
    assert 0.2 <= time.monotonic() - started < 1.0 and len(calls) >= 3


def test_wait_until_names_a_component_that_died_or_never_got_healthy(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="broker not healthy after 0 s"):
        procs.wait_until(lambda: False, 0.1, "broker")
