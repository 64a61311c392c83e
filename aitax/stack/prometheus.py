"""A real Prometheus server (Debian's package) that scrapes whatever pipeline processes register.

Processes register through file-based service discovery: one JSON file per target under `targets/`, which
Prometheus re-reads every few seconds, so a process that starts is scraped without a restart.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from aitax.common.daemons import ManagedProcess
from aitax.common.errors import UserError
from aitax.common.paths import stack_dir
from aitax.stack.config import HOST, StackConfig
from aitax.telemetry.metrics import write_scrape_target

SCRAPE_INTERVAL_S = 5


def state_dir() -> Path:
    return stack_dir() / "prometheus"


def targets_dir() -> Path:
    return state_dir() / "targets"


def process() -> ManagedProcess:
    return ManagedProcess(
        name="prometheus",
        pid_file=stack_dir() / "run" / "prometheus.pid",
        log_file=state_dir() / "prometheus.log",
        cmdline_marker=str(state_dir() / "prometheus.yml"),
    )


def binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        raise UserError("prometheus not found on PATH: `make setup` installs Debian's prometheus package")
    return path


def write_config(config: StackConfig) -> None:
    targets_dir().mkdir(parents=True, exist_ok=True)
    prometheus_yml = {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
        "scrape_configs": [
            {"job_name": "prometheus", "static_configs": [{"targets": [f"{HOST}:{config.prometheus_port}"]}]},
            {
                "job_name": "aitax",
                "file_sd_configs": [{"files": [str(targets_dir() / "*.json")], "refresh_interval": "2s"}],
            },
        ],
    }
    # JSON is valid YAML, and needs no YAML writer here.
    (state_dir() / "prometheus.yml").write_text(json.dumps(prometheus_yml, indent=2) + "\n")


def start(config: StackConfig) -> None:
    argv = [
        binary(),
        f"--config.file={state_dir() / 'prometheus.yml'}",
        f"--storage.tsdb.path={state_dir() / 'data'}",
        "--storage.tsdb.retention.time=2d",
        f"--web.listen-address={HOST}:{config.prometheus_port}",
        "--web.enable-lifecycle",
    ]
    process().start(argv, cwd=state_dir())


def ready(config: StackConfig) -> bool:
    import requests

    try:
        return requests.get(f"{config.prometheus_url}/-/ready", timeout=2).ok
    except requests.RequestException:
        return False


def register_target(name: str, port: int, labels: dict[str, str] | None = None, host: str = HOST) -> Path:
    """Add a `/metrics` endpoint to the scrape list; returns the file to delete (`unregister_target`)."""
    return write_scrape_target(targets_dir(), name, host, port, labels or {})


def unregister_target(name: str) -> None:
    (targets_dir() / f"{name}.json").unlink(missing_ok=True)
