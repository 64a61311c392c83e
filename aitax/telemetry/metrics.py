"""Prometheus metrics of a stage process, fed by the same events it logs (one source of truth).

Every stage process serves `/metrics`, and `/ready` once it can work at speed (a pod's readiness probe); given a
folder of Prometheus file-based discovery targets (the local stack's), it also announces itself there so it is
scraped without configuration. Names follow Prometheus conventions:
`aitax_` prefix, base units (`_seconds`, `_bytes`), `_total` on counters.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from aitax.common import children
from aitax.telemetry.camera_health import COUNTERS, CameraHealth
from aitax.telemetry.events import CAMERA_STAGE, Event
from aitax.telemetry.sinks import EventSink

log = logging.getLogger(__name__)
# 1 ms to 10 s: from a 32x-accelerated identify call to a broker wait that is running away.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class StageMetrics:
    def __init__(self, role: str) -> None:
        self.role = role
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes
        # Where the process runs: in a pod, its host name is the pod's, which a scrape by address does not know.
        Gauge("aitax_process_info", "1, labelled with the process's host (in a pod: the pod's name)", ["host"],
              registry=self.registry).labels(socket.gethostname()).set(1)
        self.stage_seconds = Histogram("aitax_stage_duration_seconds", "Wall time a frame or face spends in a stage",
                                       ["stage"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.broker_wait_seconds = Histogram(
            "aitax_broker_wait_seconds", "A face's broker wait by owner: produce, consumer_busy, in_kafka, "
            "client_queue (telemetry.latency)", ["part"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.batch_size = Histogram("aitax_batch_size", "Size of the batch each face was identified in",
                                    buckets=BATCH_SIZE_BUCKETS, registry=self.registry)
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
        # A live camera's health (telemetry.camera_health), from its `camera` events.
        self.camera_frames = Counter("aitax_camera_frames", "A live camera's frames by outcome: received, decoded, "
                                     "undecodable, dropped (detection behind), detected", ["stream", "outcome"],
                                     registry=self.registry)
        self.camera_connections = Counter("aitax_camera_connections", "Connections to a live camera by outcome: "
                                          "connects, reconnects (after an outage), failed_connects",
                                          ["stream", "outcome"], registry=self.registry)
        self.camera_longest_gap = Gauge("aitax_camera_longest_gap_seconds", "Longest time between two frames",
                                        ["stream"], registry=self.registry)
        self.camera_fps = Gauge("aitax_camera_frames_per_second", "A camera's frame rate: measured or declared",
                                ["stream", "kind"], registry=self.registry)
        self.camera_connected = Gauge("aitax_camera_connected", "1 while the camera delivers frames", ["stream"],
                                      registry=self.registry)
        self._camera_counts: dict[tuple[str, str], float] = {}
        self._ingest_end_ns: dict[tuple[str, int], int] = {}
        self._target: Path | None = None
        self.ready = False  # the process reported READY (/ready)
        self._unsubscribe: Callable[[], None] | None = None

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
            self.batch_size.observe(event.face_count or 1)
            if event.delivered_ns is not None:
                self.stage_seconds.labels("deliver").observe(max(0.0, (event.delivered_ns - event.wall_end_ns) / 1e9))
        elif event.stage == CAMERA_STAGE and event.camera is not None:
            self._observe_camera(event.stream_id, CameraHealth.from_document(event.camera))
        elif event.stage == "broker_wait":
            for part, ms in (event.substeps_ms or {}).items():
                self.broker_wait_seconds.labels(part).observe(max(0.0, ms / 1000))
            if event.consumer_lag is not None:
                self.consumer_lag.set(event.consumer_lag)

    def _observe_camera(self, stream: str, health: CameraHealth) -> None:
        for name in COUNTERS:
            counter = self.camera_connections if name.endswith("connects") else self.camera_frames
            total = getattr(health, name)
            counter.labels(stream, name).inc(max(0, total - self._camera_counts.get((stream, name), 0)))
            self._camera_counts[stream, name] = total
        self.camera_longest_gap.labels(stream).set(health.longest_gap_s)
        self.camera_fps.labels(stream, "measured").set(health.measured_fps)
        self.camera_fps.labels(stream, "declared").set(health.declared_fps)
        self.camera_connected.labels(stream).set(1 if health.connected else 0)

    def serve(self, name: str, port: int = 0, host: str = "127.0.0.1", scrape_targets: Path | None = None) -> int:
        """Serve /metrics (port 0: any free port), and /ready: 503 until the process reports READY (its model warm,
        its producer connected, its consumer holding partitions: `common.children`), 200 from then on, which a
        pod's readiness probe reads. Announce it in `scrape_targets` when given."""
        metrics = make_wsgi_app(self.registry)

        def app(environ, start_response):
            if environ.get("PATH_INFO") != "/ready":
                return metrics(environ, start_response)
            start_response("200 OK" if self.ready else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ready\n" if self.ready else b"starting\n"]

        self._unsubscribe = children.on_report(self._reported)
        server = make_server(host, port, app, _MetricsServer, handler_class=_Quiet)
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        bound = server.server_address[1]
        if scrape_targets is not None:
            self._target = write_scrape_target(scrape_targets, name, "127.0.0.1", bound, {"role": self.role})
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    def _reported(self, state: str) -> None:
        if state == children.READY:
            self.ready = True

    def close(self) -> None:
        if self._target is not None:
            self._target.unlink(missing_ok=True)
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None


class _MetricsServer(ThreadingWSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Every scrape and probe would be a line on stderr."""


def write_scrape_target(folder: Path, name: str, host: str, port: int, labels: dict[str, str]) -> Path:
    """One Prometheus file-SD target file (FOLDER/NAME.json); returns it, to delete when the endpoint goes."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    entry = [{"targets": [f"{host}:{port}"], "labels": {"instance_name": name, **labels}}]
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(entry))
    temporary.replace(path)  # atomic: Prometheus never reads half a file
    return path


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
