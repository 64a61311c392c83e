"""`aitax stack` as a user runs it, in a second, isolated stack (own state folder and ports).

The CLI is run as a subprocess: exit codes, one-line errors and leftover processes are what a user sees.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from aitax.common.daemons import port_is_open
from aitax.common.paths import downloads_dir
from aitax.stack.config import StackConfig

pytestmark = pytest.mark.integration
AITAX = [sys.executable, "-m", "aitax.cli"]


def _isolated_env(tmp_path: Path, port_base: int, path: str | None = None) -> dict[str, str]:
    home = tmp_path / "aitax-home"
    home.mkdir(exist_ok=True)
    if not (home / "downloads").exists():
        (home / "downloads").symlink_to(downloads_dir())  # reuse the cached jars and zip
    env = {**os.environ, "AITAX_HOME": str(home), "AITAX_PORT_BASE": str(port_base)}
    if path is not None:
        env["PATH"] = path
    return env


def _aitax(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AITAX, *args], env=env, capture_output=True, text=True, timeout=timeout)


def _stack_ports(config: StackConfig) -> list[int]:
    return ([config.broker_port(n) for n in config.node_ids] + [config.controller_port(n) for n in config.node_ids[:3]]
            + [config.elasticsearch_port, config.elasticsearch_transport_port, config.prometheus_port])


def test_up_status_up_again_down_leaves_nothing(tmp_path: Path) -> None:
    port_base = 21000
    env = _isolated_env(tmp_path, port_base)
    config = StackConfig(port_base=port_base)
    assert not any(port_is_open(p) for p in _stack_ports(config)), "ports of the isolated stack are taken"

    started = time.monotonic()
    cold = _aitax(env, "stack", "up")
    cold_s = time.monotonic() - started
    try:
        assert cold.returncode == 0, cold.stderr[-2000:] + cold.stdout[-2000:]
        status = _aitax(env, "stack", "status")
        assert status.returncode == 0, status.stdout
        for component in ("kafka-1", "kafka-2", "kafka-3", "kafka-cluster", "elasticsearch", "prometheus"):
            assert any(line.startswith(component) and " ok " in line for line in status.stdout.splitlines()), \
                status.stdout
        pids = [int(p.read_text()) for p in (tmp_path / "aitax-home" / "stack" / "run").glob("*.pid")]
        assert len(pids) == 5
        # the warm-up's own clock: the 20 s asked for, and its last round trips (a second or two on a busy machine)
        warmed = re.search(r"^brokers warmed in (\d+) s", cold.stdout, re.MULTILINE)
        assert warmed and 20 <= int(warmed.group(1)) <= 25, cold.stdout
        assert "off their preferred broker" not in status.stdout, status.stdout

        started = time.monotonic()
        warm = _aitax(env, "stack", "up")
        warm_s = time.monotonic() - started
        assert warm.returncode == 0, warm.stderr
        assert "warming" not in warm.stdout, "brokers already running are not warmed again"
        assert sorted(int(p.read_text()) for p in (tmp_path / "aitax-home" / "stack" / "run").glob("*.pid")) \
            == sorted(pids), "a warm `up` must not restart anything"
        print(f"cold stack up {cold_s:.1f} s, warm {warm_s:.1f} s")
    finally:
        down = _aitax(env, "stack", "down")
    assert down.returncode == 0, down.stderr
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    assert not [p for p in _stack_ports(config) if port_is_open(p)]
    # Elasticsearch's server JVM is a child of its launcher: nothing of the isolated home may survive.
    home = str(tmp_path / "aitax-home")
    assert not [p.pid for p in psutil.process_iter(["cmdline"]) if home in " ".join(p.info["cmdline"] or [])]
    assert _aitax(env, "stack", "down").stdout.strip() == "nothing was running"


def test_occupied_port_is_a_one_line_error(tmp_path: Path) -> None:
    port_base = 22000
    env = _isolated_env(tmp_path, port_base)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port_base + 91))
        blocker.listen()
        result = _aitax(env, "stack", "up", "--no-elasticsearch", "--no-prometheus")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"aitax: port {port_base + 91} (kafka broker 1) is already in use by another "
                                     "process; stop it or set AITAX_PORT_BASE")
    assert not port_is_open(port_base + 92), "nothing may start when a port is taken"


def test_missing_java_is_a_one_line_error(tmp_path: Path) -> None:
    env = _isolated_env(tmp_path, 23000, path="/nonexistent")
    result = _aitax(env, "stack", "up", "--no-elasticsearch", "--no-prometheus")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("aitax: Java not found on PATH")
