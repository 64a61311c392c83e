"""Child `aitax` processes started by a run, and the status channel they report through.

A child appends one JSON object per line to the file named by `$AITAX_STATUS_FILE` (`report("ready")`,
`report("summary", faces=...)`); its parent reads that file instead of scraping the child's log. Without the
variable (a pod, a shell) `report` writes nothing: stdout stays the human's. In a pod, READY is what its readiness
probe reads (`/ready` beside `/metrics`, through `on_report`).

Every child gets its own session, so a Ctrl-C on the parent reaches only the parent, which then stops its
children in order (SIGINT, a grace period, SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aitax.common.errors import UserError

STATUS_FILE_ENV = "AITAX_STATUS_FILE"
READY, SUMMARY = "ready", "summary"
POLL_S = 0.2


_listeners: list[Callable[[str], None]] = []


def on_report(listener: Callable[[str], None]) -> Callable[[], None]:
    """Call `listener(state)` at each `report` of this process (a stage's `/ready` answers from READY); returns
    what removes it."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener)


def report(state: str, **fields: object) -> None:
    """Tell the parent run (if any) that this process reached `state`, with `fields` as plain JSON data, and this
    process's listeners (`on_report`)."""
    for listener in list(_listeners):
        listener(state)
    path = os.environ.get(STATUS_FILE_ENV)
    if path:
        with open(path, "a") as out:  # one short write per line: the reader never sees half a line
            out.write(json.dumps({"state": state, **fields}) + "\n")


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    log: Path
    status_file: Path

    def statuses(self, state: str) -> list[dict]:
        """Every status this child reported with `state`, oldest first."""
        try:
            lines = self.status_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        found = []
        for line in lines:
            try:
                status = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if status.get("state") == state:
                found.append(status)
        return found

    def has_reported(self, state: str) -> bool:
        return bool(self.statuses(state))

    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def tail(self, lines: int = 3) -> str:
        """The last lines of the child's log, joined on one line (for an error message)."""
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""


def spawn(name: str, argv: Sequence[str], logs: Path, env: dict[str, str] | None = None) -> Child:
    """Start `aitax ARGV...` in its own session, output to LOGS/NAME.log, status to LOGS/NAME.status.jsonl."""
    logs.mkdir(parents=True, exist_ok=True)
    log, status_file = logs / f"{name}.log", logs / f"{name}.status.jsonl"
    status_file.unlink(missing_ok=True)
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "aitax.cli", *argv], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   env={**os.environ, **(env or {}), STATUS_FILE_ENV: str(status_file)})
    return Child(name, process, log, status_file)


class NotReadyError(UserError):
    """A child exited, or the deadline passed, before every child reported the state waited for."""


def wait_reported(children: Sequence[Child], state: str, timeout_s: float, what: str) -> None:
    """Wait until every child reported `state`; a child that exits first, or the deadline, is a NotReadyError."""
    deadline = time.monotonic() + timeout_s
    while not all(child.has_reported(state) for child in children):
        dead = [child for child in children if not child.running()]
        if dead:
            raise NotReadyError(f"{dead[0].name} exited with {dead[0].returncode} before it was {state}: "
                                f"{dead[0].tail()}")
        if time.monotonic() > deadline:
            raise NotReadyError(f"{what} not {state} after {timeout_s:.0f} s")
        time.sleep(POLL_S)


def stop(children: Iterable[Child], timeout_s: float) -> list[Child]:
    """SIGINT to every child still running (each finishes what it holds), then SIGKILL at the deadline; returns
    the children that had to be killed."""
    children = list(children)
    for child in children:
        if child.running():
            child.process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + timeout_s
    killed = []
    for child in children:
        try:
            child.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()
            killed.append(child)
    return killed


def failed(children: Iterable[Child], ignore: Iterable[int] = (), accepted: Collection[int] = (0,)) -> list[Child]:
    """Children that exited with a status not in `accepted`, except those in `ignore` (pids killed on purpose).
    Still running is not failed."""
    ignored = set(ignore)
    return [child for child in children if child.pid not in ignored
            and child.returncode is not None and child.returncode not in accepted]
