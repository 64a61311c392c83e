"""The live dashboard's view, on the hand-built run of test_report (every figure known) and a RunResult."""

from __future__ import annotations

import base64

import pytest

from aitax.reporting.dashboard import ViewerLogin
from aitax.reporting.live import BATCH_SERIES, build_view
from aitax.reporting.report import build_report
from aitax.runs.results import Condition, Resources, Verdict
from aitax.telemetry.latency import LatencySummary, tail_of
from tests.unit.results_builders import emulated_run
from tests.unit.test_report import RUN, synthetic_events

T0_S = 1_700_000_000.0


@pytest.fixture
def report():
    return build_report(RUN, [event.to_document() for event in synthetic_events()])


def test_each_second_holds_the_faces_identified_in_it_and_what_detection_offered(report) -> None:
    first, second, third = report.load.buckets
    # identified at 200 and 400 ms (e2e 200, 400), at 1300 and 1500 ms (1300, 500), at 2200 ms (200)
    assert (first.faces_finished, second.faces_finished, third.faces_finished) == (2, 2, 1)
    assert first.p50_e2e_ms == pytest.approx(300.0) and third.p99_e2e_ms == pytest.approx(200.0)
    assert first.stages_ms["identify"] == pytest.approx(100.0) and second.stages_ms["identify"] == pytest.approx(200.0)
    # detection ended at 60 ms (2 faces), 80 ms (1), 150 ms (0); 1090 ms (1); 2050 and 2100 ms (1 each)
    assert [(b.frames_detected, b.faces_detected) for b in report.load.buckets] == [(3, 3), (1, 1), (2, 2)]
    assert [b.width_s for b in report.load.buckets] == pytest.approx([1.0, 1.0, 0.2])
    # each bucket's stages tile its faces' mean end to end
    assert sum(first.stages_ms.values()) == pytest.approx(first.mean_e2e_ms)


def test_while_running_the_headline_comes_from_the_events(report) -> None:
    view = build_view(RUN, report, {}, T0_S, None)
    assert view.state == "running" and view.verdict == []
    tiles = {tile.key: tile for tile in view.tiles}
    assert tiles["identified"].value == 5 and tiles["identified"].source == "events"
    assert tiles["p50"].value == pytest.approx(report.latency.e2e.p50_ms)
    names = [series.name for series in view.latency]
    assert names[-2:] == ["end to end p50", "end to end p99"] and "identify" in names
    offered, achieved, _ = view.throughput
    # per second of each bucket: the last is 0.2 s long (the run's last event ends at 2.2 s)
    assert offered.y == pytest.approx([3.0, 1.0, 10.0]) and achieved.y == pytest.approx([2.0, 2.0, 5.0])
    assert [(c.stream_id, c.frames, c.faces) for c in view.cameras] == [("cam-1", 3, 3), ("cam-2", 3, 2)]


def test_once_ended_the_headline_and_verdict_are_the_run_results(report) -> None:
    result = emulated_run(4.0, stable=False, writes=1e6).model_copy(update={
        "identified_faces": 5, "achieved_faces_per_s": 2.5,
        "latency": LatencySummary(faces=5, mean_ms=520.0, p50_ms=400.0, p99_ms=1290.0,
                                  tail=tail_of([200.0, 400.0, 1300.0, 500.0, 200.0]),
                                  breakdown_ms={"produce": 12.0, "consumer_busy": 276.0, "in_kafka": 14.0,
                                                "client_queue": 10.0},
                                  broker_wait_share=0.6, batch_sizes={1: 3, 2: 2}),
        "verdict": Verdict(conditions=[Condition(name="backlog drained", held=False, measured="3 faces",
                                                 required="0")]),
        "resources": Resources(broker_disk_write_bytes_per_s=1e6, broker_disk_read_bytes_per_s=0.0,
                               saturated="disk of broker 2")})
    metrics = {"bytes_in": {"1": [(T0_S + 2, 100.0)], "2": [(T0_S + 2, 50.0)]}, "batch_mean": {"": [(T0_S + 4, 1.2)]}}
    view = build_view(RUN, report, metrics, T0_S, result)
    tiles = {tile.key: tile for tile in view.tiles}
    assert view.state == "ended" and all(tile.source == "result" for tile in view.tiles)
    assert (tiles["identified"].text, tiles["achieved"].text, tiles["p50"].text, tiles["p99"].text) == \
        ("5", "2.5", "400.0 ms", "1290.0 ms")
    assert tiles["broker_wait"].value == pytest.approx(312.0) and tiles["broker_wait_share"].text == "60 %"
    assert tiles["batch_p50"].value == 1.0 and view.batch_histogram == {1: 3, 2: 2}
    assert [(row.name, row.held) for row in view.verdict] == [("backlog drained", False)]
    assert view.saturated == "disk of broker 2"
    assert [(s.name, s.x_s, s.y) for s in view.brokers["bytes_in"]] == [("broker 1", [2.0], [100.0]),
                                                                      ("broker 2", [2.0], [50.0])]
    assert [(s.name, s.x_s, s.y) for s in view.batch_sizes] == [(BATCH_SERIES, [4.0], [1.2])]


def test_a_live_cameras_health_is_beside_its_stream_in_the_view_and_on_the_page(report) -> None:
    from dataclasses import replace

    from aitax.reporting.dashboard import _cameras
    from aitax.reporting.report import CameraReport
    from aitax.telemetry.camera_health import CameraHealth

    health = CameraHealth(received=40, dropped=4, detected=36, reconnects=2, longest_gap_s=3.25, measured_fps=9.5,
                          declared_fps=10.0, connected=True)
    view = build_view(RUN, replace(report, cameras=[CameraReport("cam-2", health)]), {}, T0_S, None)
    assert view.camera_health == {"cam-2": health}
    rows = [[str(cell.children) for cell in row.children] for row in _cameras(view).children[1:]]
    assert rows[0][4:] == ["-"] * 6  # cam-1 is a file: no camera health
    assert rows[1][4:] == ["40", "4", "2", "3.2", "9.5 / 10", "yes"]


def test_no_run_yet_is_a_state_not_an_error() -> None:
    view = build_view(None, None, {}, None, None, ["no events in https://es yet"])
    assert view.state == "waiting for a run" and view.tiles == [] and view.notes == ["no events in https://es yet"]


def test_the_viewer_login_admits_only_its_own_password() -> None:
    login = ViewerLogin("viewer", "s3cret")

    def basic(text: str) -> str:
        return "Basic " + base64.b64encode(text.encode()).decode()

    assert login.admits(basic("viewer:s3cret"))
    assert not login.admits(basic("viewer:wrong")) and not login.admits(basic("admin:s3cret"))
    assert not login.admits(None) and not login.admits("Bearer x") and not login.admits("Basic !!notbase64")


def test_a_url_shown_on_the_page_carries_no_password() -> None:
    from aitax.reporting.live_sources import redacted

    assert redacted("https://writer:s3cret@es.example:9200/") == "https://es.example:9200/"
    assert redacted("https://es.example:9200") == "https://es.example:9200"
