"""What every stage process does around its loop, real or emulated: its settings, its telemetry (event sink and
/metrics) and a stop flag. The command line resolves the settings once (from flags, the environment of a pod,
or the local stack); nothing below it looks anything up."""

from __future__ import annotations

import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from aitax.telemetry.metrics import MetricsSink, StageMetrics
from aitax.telemetry.sinks import EventSink, open_sink


@dataclass(frozen=True)
class StageSettings:
    bootstrap: str  # Kafka brokers HOST:PORT,...
    kafka_client: str  # pipeline.transport.KAFKA_CLIENTS
    events: str  # event sink spec (telemetry.sinks.open_sink)
    metrics_port: int  # /metrics port: 0 any free one, -1 none
    metrics_host: str = "127.0.0.1"
    scrape_targets: Path | None = None  # a Prometheus file-SD folder to announce /metrics in


def new_run_id() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def open_telemetry(settings: StageSettings, role: str, process_name: str) -> tuple[EventSink, StageMetrics]:
    """The process's event sink, wrapped so every event also feeds its Prometheus metrics when they are served."""
    metrics = StageMetrics(role)
    sink = open_sink(settings.events, process_name)
    if settings.metrics_port < 0:
        return sink, metrics
    metrics.serve(process_name, settings.metrics_port, host=settings.metrics_host,
                  scrape_targets=settings.scrape_targets)
    return MetricsSink(sink, metrics), metrics


def stop_flag() -> list[bool]:
    """A flag set by SIGINT/SIGTERM: the loops finish what they hold and exit cleanly."""
    flag = [False]

    def handler(signum, frame) -> None:
        flag[0] = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return flag
