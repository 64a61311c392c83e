"""Child processes of a run: exit statuses judged, and the status channel read instead of logs."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from aitax.common import children
from aitax.common.errors import UserError


def test_statuses_travel_through_the_status_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    status_file = tmp_path / "child.status.jsonl"
    monkeypatch.setenv(children.STATUS_FILE_ENV, str(status_file))
    children.report(children.READY)
    children.report(children.SUMMARY, faces=3)
    child = children.Child("c", process=None, log=tmp_path / "child.log", status_file=status_file)  # type: ignore[arg-type]
    assert child.has_reported(children.READY)
    assert child.statuses(children.SUMMARY) == [{"state": "summary", "faces": 3}]


def test_report_without_a_parent_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(children.STATUS_FILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    children.report(children.READY)
    assert list(tmp_path.iterdir()) == []


def test_any_non_zero_exit_is_a_failure_unless_accepted(tmp_path: Path) -> None:
    ok = children.spawn("ok", ["--version"], tmp_path)
    bad = children.spawn("bad", ["no-such-command"], tmp_path)  # an unknown command: exit 2
    interrupted = children.spawn("interrupted", ["--version"], tmp_path)
    for child in (ok, bad, interrupted):
        child.process.wait(60)
    interrupted.process.returncode = 130  # what a child stopped before its handler was installed returns
    assert children.failed([ok, bad, interrupted]) == [bad, interrupted]
    assert children.failed([ok, bad, interrupted], accepted=(0, -signal.SIGINT, 130)) == [bad]
    assert children.failed([ok, bad, interrupted], ignore=[bad.pid, interrupted.pid]) == []


def test_a_child_that_exits_before_it_is_ready_is_named(tmp_path: Path) -> None:
    child = children.spawn("quitter", ["--version"], tmp_path)
    with pytest.raises(UserError, match=r"quitter exited with 0 before it was ready: aitax"):
        children.wait_reported([child], children.READY, 60, "the quitter")
