"""Long-lived background processes (the local stack's servers, a cluster node's components), tracked by PID files so
`down` stops only what `up` started; and waiting for them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psutil

from aitax.common.errors import UserError

# Up to what age an empty command line (a process still inside execve) is waited out before the PID counts as
# foreign.
EXEC_GRACE_S = 10.0
T = TypeVar("T")


@dataclass(frozen=True)
class ManagedProcess:
    """One stack component's process: its PID file, log file and a marker that must be in its command line.

    The marker guards against PID reuse: a stale PID file never makes us signal an unrelated process.
    """

    name: str
    pid_file: Path
    log_file: Path
    cmdline_marker: str

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            process = psutil.Process(pid)
            # Mid-exec (a large binary paging in from a busy disk) the kernel reports an empty command line for
            # a moment: a process that young is ours starting, not a stranger. An older one with no command line
            # (a kernel thread that reused the PID) is refused at once.
            deadline = process.create_time() + EXEC_GRACE_S
            while True:
                if process.status() == psutil.STATUS_ZOMBIE:
                    return None
                cmdline = process.cmdline()
                if cmdline or time.time() > deadline:
                    break
                time.sleep(0.05)
            if self.cmdline_marker not in " ".join(cmdline):
                return None
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        return pid

    def is_running(self) -> bool:
        return self.pid() is not None

    def start(self, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
        """Start detached (own session, so Ctrl-C on `aitax` does not reach it) and record its PID."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{process.pid}\n")
        return process.pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL. Returns True if a process was stopped."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)  # stale: its process is gone
            return False
        process = psutil.Process(pid)
        # Launchers (Elasticsearch's) run the server as a child: stop the whole tree.
        tree = [process, *process.children(recursive=True)]
        process.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(tree, timeout=timeout_s)
        for leftover in alive:
            leftover.kill()
        psutil.wait_procs(alive, timeout=10)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> bool:
        """SIGKILL with no grace: the fault experiments' broker crash."""
        pid = self.pid()
        if pid is None:
            return False
        process = psutil.Process(pid)
        tree = [process, *process.children(recursive=True)]
        for member in tree:
            member.kill()
        psutil.wait_procs(tree, timeout=10)
        self.pid_file.unlink(missing_ok=True)
        return True

    def rss_bytes(self) -> int:
        """Resident memory of the process and its children (Elasticsearch's server runs under a launcher)."""
        pid = self.pid()
        if pid is None:
            return 0
        try:
            process = psutil.Process(pid)
            return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
        except psutil.NoSuchProcess:
            return 0

    def log_tail(self, lines: int = 5) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def port_is_open(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        return sock.connect_ex((host, port)) == 0


def require_free_port(port: int, what: str) -> None:
    if port_is_open(port):
        raise UserError(f"port {port} ({what}) is already in use by another process; stop it or set AITAX_PORT_BASE")


def poll_until(condition: Callable[[], T], timeout_s: float, interval_s: float = 0.5) -> T:
    """`condition()` every `interval_s` until it returns something true or `timeout_s` has passed; its last value
    (false on a timeout: the caller decides whether that is an error)."""
    deadline = time.monotonic() + timeout_s
    while not (result := condition()) and time.monotonic() < deadline:
        time.sleep(max(0.0, min(interval_s, deadline - time.monotonic())))
    return result


def wait_until(predicate, timeout_s: float, what: str, process: ManagedProcess | None = None) -> None:
    """Poll `predicate` until true; fail with the component's last log lines if it dies or times out."""

    def healthy() -> bool:
        if predicate():
            return True
        if process is not None and not process.is_running():
            raise UserError(f"{what} exited during start-up; see {process.log_file}: {process.log_tail(3)}")
        return False

    if not poll_until(healthy, timeout_s):
        raise UserError(f"{what} not healthy after {timeout_s:.0f} s; see "
                        f"{process.log_file if process else 'its log'}")
