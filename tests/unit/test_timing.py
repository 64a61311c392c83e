"""Sub-step timers and the metrics they feed."""

from __future__ import annotations

import time

from aitax.telemetry.events import Event
from aitax.telemetry.metrics import StageMetrics
from aitax.telemetry.timing import Stopwatch


def test_stopwatch_accumulates_and_reports_the_rest_as_other() -> None:
    watch = Stopwatch()
    with watch.time("pnet"):
        time.sleep(0.01)
    watch.add("pnet", 5.0)
    watch.add("crop", 2.0)
    breakdown = watch.with_other(total_ms=40.0)
    assert breakdown["pnet"] >= 15.0
    assert breakdown["crop"] == 2.0
    assert breakdown["other"] == round(40.0 - breakdown["pnet"] - 2.0, 3)
    assert watch.with_other(total_ms=1.0)["other"] == 0.0  # never negative


def _value(metrics: StageMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.registry.get_sample_value(name, labels or {})


def test_metrics_follow_events_including_the_frame_queue() -> None:
    metrics = StageMetrics("ingest-detect")
    common = dict(run_id="r", stream_id="cam-1", frame_index=3)
    metrics.observe(Event(stage="ingest", wall_start_ns=0, wall_end_ns=10_000_000, compute_time_ms=10, **common))
    metrics.observe(Event(stage="detect", wall_start_ns=40_000_000, wall_end_ns=140_000_000, compute_time_ms=100,
                          face_count=2, data_size_bytes=80_000, **common))
    assert _value(metrics, "aitax_frames_total", {"stage": "detect"}) == 1
    assert _value(metrics, "aitax_faces_total", {"stage": "detect"}) == 2
    assert _value(metrics, "aitax_payload_bytes_total", {"stage": "detect"}) == 80_000
    # 30 ms between the frame leaving ingestion and detection starting on it
    assert _value(metrics, "aitax_stage_duration_seconds_sum", {"stage": "frame_queue"}) == 0.03
    assert _value(metrics, "aitax_stage_duration_seconds_sum", {"stage": "detect"}) == 0.1
    metrics.observe(Event(stage="broker_wait", wall_start_ns=0, wall_end_ns=1, compute_time_ms=0, consumer_lag=17,
                          **common))
    assert _value(metrics, "aitax_consumer_lag_records") == 17


def test_a_stage_is_ready_for_its_probe_once_it_reports_ready_and_metrics_are_served_throughout(tmp_path) -> None:
    import urllib.error
    import urllib.request

    from aitax.common.children import READY, SUMMARY, report

    metrics = StageMetrics("identify")
    port = metrics.serve("identify-test", port=0, scrape_targets=tmp_path)

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    try:
        assert get("/ready") == (503, "starting\n")  # serving metrics, not yet work: its model still warming
        status, body = get("/metrics")
        assert status == 200 and "aitax_process_info" in body
        report(SUMMARY, frames=1)  # another state changes nothing
        assert get("/ready")[0] == 503
        report(READY)
        assert get("/ready") == (200, "ready\n")
    finally:
        metrics.close()
    assert StageMetrics("identify").ready is False  # each process's own, from its own report
