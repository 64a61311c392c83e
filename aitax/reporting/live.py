"""What the live dashboard shows, as plain data: one run's report rebuilt from its events, the brokers' and the
batcher's series from Prometheus, and, once the run has ended, its RunResult.

`build_view` is a pure function of those three; the sources sit at the edges (`report_sources.load_events`,
`PrometheusRange`, `find_result`) and the Dash app (`reporting.dashboard`) only draws the view. Headline numbers
come from the RunResult when there is one, so the dashboard and `aitax run`'s summary never disagree; while the run
goes on they come from its events, and say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from aitax.reporting.report import BREAKDOWN_STAGES, Report, StreamThroughput
from aitax.runs.results import Condition, RunResult
from aitax.telemetry.camera_health import CameraHealth
from aitax.telemetry.latency import batch_size_p50, broker_wait_ms

# A rate needs two samples in its window: six of the local Prometheus's 5 s scrapes, two of the chart's
# Pod/ServiceMonitor's 15 s ones.
RATE_WINDOW = "30s"
STEP_S = 2.0


@dataclass(frozen=True)
class Query:
    """One PromQL series family the dashboard draws, a series per broker (by its `broker` label locally, its `pod`
    in a cluster) or one."""

    key: str
    promql: str


# The brokers: Kafka's own meters through the JMX exporter (the Grafana dashboard's Fig. 11a and saturation panels),
# by the `broker` label the local stack gives each broker's target, or the `pod` a cluster's scrape gives it.
BY_BROKER = "by (broker, pod)"
BROKER_QUERIES = (
    *(Query(key, f'sum {BY_BROKER} (rate(kafka_server_brokertopicmetrics_{meter}_total{{topic=""}}[{RATE_WINDOW}]))')
      for key, meter in (("bytes_in", "bytesin"), ("replication_in", "replicationbytesin"), ("bytes_out", "bytesout"))),
    # The least idle thread pool reading of a broker; a ratio a little over 1 (the meter's rounding) is no negative
    # busyness.
    Query("handler_busy", f"clamp_min(1 - min {BY_BROKER} (kafka_server_request_handler_idle_ratio), 0)"),
    Query("network_busy", f"clamp_min(1 - min {BY_BROKER} (kafka_network_processor_idle_ratio), 0)"),
)
# The consuming stages' dynamic batcher: `aitax_batch_size` is observed once per face (telemetry.metrics), so its
# mean is the size of the batch the mean face rode in. Not a histogram_quantile: its interpolation inside the first
# bucket reads batches of one as 0.5.
BATCH_QUERIES = (
    Query("batch_mean", f"sum(rate(aitax_batch_size_sum[{RATE_WINDOW}])) / "
                        f"sum(rate(aitax_batch_size_count[{RATE_WINDOW}]))"),
)
BATCH_SERIES = "batch size per face (mean)"
QUERIES = BROKER_QUERIES + BATCH_QUERIES


@dataclass(frozen=True)
class Series:
    name: str
    x_s: list[float]  # seconds since the run's first event
    y: list[float]


@dataclass(frozen=True)
class Tile:
    key: str
    label: str
    value: float | None
    text: str  # as shown
    source: str  # "result" (the RunResult) or "events" (the run so far)


@dataclass(frozen=True)
class DashboardView:
    run_id: str | None
    state: str  # "waiting for a run", "running", "ended"
    tiles: list[Tile] = field(default_factory=list)
    latency: list[Series] = field(default_factory=list)  # mean per stage per second, then e2e p50 and p99
    throughput: list[Series] = field(default_factory=list)  # offered (faces detected) and achieved (identified)
    batch_sizes: list[Series] = field(default_factory=list)  # the batcher's mean, over time
    batch_histogram: dict[int, int] = field(default_factory=dict)  # faces by batch size (the RunResult's)
    brokers: dict[str, list[Series]] = field(default_factory=dict)  # by BROKER_QUERIES key, a series per broker
    saturated: str = ""
    cameras: list[StreamThroughput] = field(default_factory=list)  # a stream is a camera
    camera_health: dict[str, CameraHealth] = field(default_factory=dict)  # live cameras' (pipeline.camera)
    verdict: list[Condition] = field(default_factory=list)  # the RunResult's
    notes: list[str] = field(default_factory=list)


def _digits(value: float | None, digits: int, unit: str = "") -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}{unit}"


def _tiles(report: Report | None, result: RunResult | None) -> list[Tile]:
    if result is not None:
        latency = result.latency
        share = latency.broker_wait_share if latency else None
        batch = batch_size_p50(latency.batch_sizes) if latency else None
        values = (
            ("identified", "faces identified", float(result.identified_faces), 0, ""),
            ("achieved", "achieved faces/s", result.achieved_faces_per_s, 1, ""),
            ("p50", "end to end p50", latency.p50_ms if latency else None, 1, " ms"),
            ("p99", "end to end p99", latency.p99_ms if latency else None, 1, " ms"),
            ("broker_wait", "broker wait (mean)", broker_wait_ms(latency.breakdown_ms) if latency else None, 1,
             " ms"),
            ("broker_wait_share", "broker wait share", None if share is None else 100 * share, 0, " %"),
            ("batch_p50", "batch size p50", batch, 0, ""),
        )
        return [Tile(key, label, value, _digits(value, digits, unit), "result")
                for key, label, value, digits, unit in values]
    if report is None:
        return []
    e2e = report.latency.e2e if report.latency else None
    wait = report.latency.broker_wait.mean_ms if report.latency else None
    values = (
        ("identified", "faces identified", float(report.faces_identified), 0, ""),
        ("achieved", "identified faces/s", report.throughput.total.faces_per_s, 1, ""),
        ("p50", "end to end p50", e2e.p50_ms if e2e else None, 1, " ms"),
        ("p99", "end to end p99", e2e.p99_ms if e2e else None, 1, " ms"),
        ("broker_wait", "broker wait (mean)", wait, 1, " ms"),
    )
    return [Tile(key, label, value, _digits(value, digits, unit), "events")
            for key, label, value, digits, unit in values]


def _latency_series(report: Report) -> list[Series]:
    buckets = [b for b in report.load.buckets if b.faces_finished]
    x = [b.start_s for b in buckets]
    series = [Series(stage, x, [b.stages_ms.get(stage, 0.0) for b in buckets]) for stage in BREAKDOWN_STAGES
              if any(b.stages_ms.get(stage, 0.0) for b in buckets)]
    return [*series, Series("end to end p50", x, [b.p50_e2e_ms or 0.0 for b in buckets]),
            Series("end to end p99", x, [b.p99_e2e_ms or 0.0 for b in buckets])]


def _throughput_series(report: Report) -> list[Series]:
    buckets = [b for b in report.load.buckets if b.width_s > 0]
    x = [b.start_s for b in buckets]
    return [Series("offered (faces detected/s)", x, [b.faces_detected / b.width_s for b in buckets]),
            Series("achieved (faces identified/s)", x, [b.faces_finished / b.width_s for b in buckets]),
            Series("frames detected/s", x, [b.frames_detected / b.width_s for b in buckets])]


def _relative(points: dict[str, list[tuple[float, float]]], start_s: float, prefix: str) -> list[Series]:
    return [Series(f"{prefix}{label}".strip(), [t - start_s for t, _ in values], [v for _, v in values])
            for label, values in sorted(points.items())]


def build_view(run_id: str | None, report: Report | None, metrics: dict[str, dict[str, list[tuple[float, float]]]],
               started_s: float | None, result: RunResult | None, notes: list[str] | None = None) -> DashboardView:
    """The dashboard's content. `metrics`: QUERIES' results by key; `started_s`: the run's first event (unix s),
    the origin of every time axis."""
    if report is None and result is None:
        return DashboardView(run_id, "waiting for a run", notes=notes or [])
    origin = started_s or 0.0
    view_brokers = {q.key: _relative(metrics.get(q.key, {}), origin, "broker ") for q in BROKER_QUERIES}
    batches = [Series(BATCH_SERIES, s.x_s, s.y) for s in _relative(metrics.get("batch_mean", {}), origin, "")]
    return DashboardView(
        run_id=run_id, state="ended" if result else "running", tiles=_tiles(report, result),
        latency=_latency_series(report) if report else [], throughput=_throughput_series(report) if report else [],
        batch_sizes=batches, batch_histogram=dict(result.latency.batch_sizes) if result and result.latency else {},
        brokers=view_brokers,
        saturated=result.resources.saturated if result and result.resources else "",
        cameras=report.throughput.streams if report else [],
        camera_health={c.stream_id: c.health for c in report.cameras} if report else {},
        verdict=result.verdict.conditions if result else [], notes=notes or [])


def find_result(runs_dirs: list[Path], run_id: str) -> RunResult | None:
    """The run's RunResult, once `aitax run` or the demo has written it beside the run's events."""
    from aitax.runs.results import RESULT_FILE, read_results

    for runs_dir in runs_dirs:
        path = runs_dir / run_id / RESULT_FILE
        if path.is_file():
            return read_results(path, RunResult)
    return None
