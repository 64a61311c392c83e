"""Prometheus metrics of a stage process, fed by the same events it logs (one source of truth).

Every stage process serves `/metrics`; on the local stack it also registers itself with Prometheus's
file-based discovery so it is scraped without configuration. Names follow Prometheus conventions:
`aitax_` prefix, base units (`_seconds`, `_bytes`), `_total` on counters.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server

from telemetry.events import Event
from telemetry.sinks import EventSink

log = logging.getLogger(__name__)
# 1 ms to 10 s: from a 32x-accelerated identify call to a broker wait that is running away.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class StageMetrics:
    def __init__(self, role: str) -> None:
        self.role = role
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes
        self.stage_seconds = Histogram("aitax_stage_duration_seconds", "Wall time a frame or face spends in a stage",
                                       ["stage"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.frames = Counter("aitax_frames", "Frames processed", ["stage"], registry=self.registry)
        self.faces = Counter("aitax_faces", "Faces found (detect) or identified (identify)", ["stage"],
                             registry=self.registry)
        self.payload_bytes = Counter("aitax_payload_bytes", "Bytes a stage handed on", ["stage"],
                                     registry=self.registry)
        self.queue_depth = Gauge("aitax_frame_queue_depth", "Frames waiting between ingest and detect",
                                 registry=self.registry)
        self.consumer_lag = Gauge("aitax_consumer_lag_records", "Records behind the partition end at last poll",
                                  registry=self.registry)
        self.dead_letters = Counter("aitax_dead_letters", "Records sent to the dead-letter topic",
                                    registry=self.registry)
        self.delivery_failures = Counter("aitax_delivery_failures", "Records the brokers did not acknowledge",
                                         registry=self.registry)
        self.duplicates = Counter("aitax_duplicate_faces", "Redelivered faces skipped", registry=self.registry)
        self._ingest_end_ns: dict[tuple[str, int], int] = {}
        self._target: str | None = None

    def observe(self, event: Event) -> None:
        seconds = (event.wall_end_ns - event.wall_start_ns) / 1e9
        self.stage_seconds.labels(event.stage).observe(max(0.0, seconds))
        if event.stage == "ingest":
            self.frames.labels("ingest").inc()
            self._ingest_end_ns[(event.stream_id, event.frame_index)] = event.wall_end_ns
        elif event.stage == "detect":
            self.frames.labels("detect").inc()
            self.faces.labels("detect").inc(event.face_count or 0)
            self.payload_bytes.labels("detect").inc(event.data_size_bytes or 0)
            ingested = self._ingest_end_ns.pop((event.stream_id, event.frame_index), None)
            if ingested is not None:
                self.stage_seconds.labels("frame_queue").observe(max(0.0, (event.wall_start_ns - ingested) / 1e9))
        elif event.stage == "identify":
            self.faces.labels("identify").inc()
        elif event.stage == "broker_wait" and event.consumer_lag is not None:
            self.consumer_lag.set(event.consumer_lag)

    def serve(self, name: str, port: int = 0, host: str = "127.0.0.1") -> int:
        """Serve /metrics (port 0: any free port) and, on the local stack, ask Prometheus to scrape it."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        bound = server.server_address[1]
        from aitax.stack import prometheus
        from aitax.stack.stack import current_config

        config = current_config()
        if config is not None and config.prometheus and prometheus.process().is_running():
            prometheus.register_target(name, bound, {"role": self.role})
            self._target = name
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    def close(self) -> None:
        if self._target is not None:
            from aitax.stack import prometheus

            prometheus.unregister_target(self._target)


class MetricsSink:
    """Passes events on and counts them into the metrics."""

    enabled = True

    def __init__(self, inner: EventSink, metrics: StageMetrics) -> None:
        self.inner = inner
        self.metrics = metrics

    def emit(self, event: Event) -> None:
        self.metrics.observe(event)
        self.inner.emit(event)

    def close(self) -> None:
        self.inner.close()
