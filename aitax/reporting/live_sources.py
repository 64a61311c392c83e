"""Where the live dashboard's data comes from: the events (Elasticsearch or a JSONL folder), Prometheus's HTTP API,
and the RunResult files beside the runs' events. Each refresh reads them afresh and hands them to
`reporting.live.build_view`."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from aitax.common.errors import UserError
from aitax.reporting.live import QUERIES, STEP_S, DashboardView, build_view, find_result
from aitax.reporting.report import NS_PER_S, build_report
from aitax.telemetry.elastic_access import redacted
from aitax.telemetry.event_sources import load_events
from aitax.telemetry.events import INDEX_PREFIX

Points = dict[str, list[tuple[float, float]]]  # series label -> (unix s, value)


class PrometheusRange:
    """Prometheus's range queries (`/api/v1/query_range`), a series per value of the query's one `by` label."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def __call__(self, promql: str, start_s: float, end_s: float, step_s: float) -> Points:
        response = requests.get(f"{self.url}/api/v1/query_range", timeout=self.timeout_s,
                                params={"query": promql, "start": start_s, "end": end_s, "step": step_s})
        response.raise_for_status()
        series = {}
        for item in response.json()["data"]["result"]:
            label = " ".join(value for value in item["metric"].values() if value)
            series[label] = [(float(t), float(v)) for t, v in item["values"] if v not in ("NaN", "+Inf", "-Inf")]
        return series


def latest_run_id(events: str) -> str | None:
    """The run whose event started last: what a dashboard without --run-id follows."""
    if events.startswith(("http://", "https://")):
        from elasticsearch import ApiError, TransportError

        from aitax.telemetry.elastic_access import client

        es = client(events, request_timeout=10)
        try:
            hits = es.search(index=f"{INDEX_PREFIX}-*", size=1, sort=[{"wall_start_ns": "desc"}],
                             source=["run_id"], ignore_unavailable=True, allow_no_indices=True)["hits"]["hits"]
        except (ApiError, TransportError):
            return None
        finally:
            es.close()
        return hits[0]["_source"]["run_id"] if hits else None
    # A run's folder of JSONL files: the run of the newest file's last event.
    files = sorted(Path(events).glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    for file in reversed(files):
        for line in reversed(file.read_text(errors="replace").splitlines()):
            try:
                return json.loads(line)["run_id"]
            except (ValueError, KeyError, TypeError):
                continue
    return None


@dataclass
class LiveSources:
    """A dashboard's sources. `run_id` None follows the newest run; `runs_dirs` are where RunResults are found."""

    events: str
    prometheus: str | None
    runs_dirs: list[Path]
    run_id: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _cached: tuple[float, DashboardView] | None = None

    def view(self, max_age_s: float = 1.0) -> DashboardView:
        """The view, read at most once per `max_age_s` however many browsers ask."""
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] > max_age_s:
                self._cached = (time.monotonic(), self._read())
            return self._cached[1]

    def _read(self) -> DashboardView:
        shown = redacted(self.events)
        notes: list[str] = []
        run_id = self.run_id or latest_run_id(self.events)
        if run_id is None:
            return build_view(None, None, {}, None, None, [f"no events in {shown} yet"])
        try:
            result = find_result(self.runs_dirs, run_id)
        except UserError as error:  # a result being written, or of another schema: the events still show
            result = None
            notes.append(str(error))
        try:
            loaded = load_events(run_id, self.events)
        except UserError as error:
            loaded = None
            notes.append(str(error).replace(self.events, shown))
            if result is None:
                return build_view(run_id, None, {}, None, None, notes)
        report = build_report(run_id, loaded.documents, loaded.malformed_lines) if loaded else None
        started_s = ended_s = None
        if loaded:
            started_s = loaded.documents[0]["wall_start_ns"] / NS_PER_S
            ended_s = max(d["wall_end_ns"] for d in loaded.documents) / NS_PER_S
        elif result is not None:
            started_s, ended_s = result.load_started_ns / NS_PER_S, result.load_ended_ns / NS_PER_S
        metrics = {}
        if self.prometheus and started_s is not None:
            end_s = min(time.time(), ended_s + 30) if result else time.time()
            query = PrometheusRange(self.prometheus)
            for q in QUERIES:
                try:
                    metrics[q.key] = query(q.promql, started_s, end_s, STEP_S)
                except (requests.RequestException, KeyError, ValueError) as error:
                    notes.append(f"Prometheus at {self.prometheus}: {q.key}: {error}")
                    break
        return build_view(run_id, report, metrics, started_s, result, notes)
