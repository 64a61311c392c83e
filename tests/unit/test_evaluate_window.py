"""`aitax evaluate --warmup`: latency counts the faces scheduled after the warm-up that follows the first identity
(a release's start-up and its backlog left out), within `--window` when given, accuracy every face; `--json` carries
the window's quantiles."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from aitax.pipeline.evaluate import Evaluation, after_warmup, measure_latency
from tests.unit.results_builders import identity

MS = 1_000_000


def _faces() -> list:
    """A backlog queued while identify loaded (scheduled 0-900 ms, all delivered at 5 s: 4.1-5 s each), then
    steady faces every 100 ms from 5 s, each 50 ms end to end, one of them 400 ms; one face a frame."""
    backlog = [identity(scheduled, 5000 - scheduled) for scheduled in range(0, 1000, 100)]
    steady = [identity(scheduled, 400 if scheduled == 9000 else 50) for scheduled in range(5000, 15000, 100)]
    return [replace(face, frame_index=face.scheduled_ns // (100 * MS)) for face in backlog + steady]


def _event(frame_index: int) -> dict:
    return {"stage": "identify", "stream_id": "s", "frame_index": frame_index, "wall_start_ns": frame_index * 100 * MS,
            "wall_end_ns": (frame_index * 100 + 40) * MS}


def test_the_warmup_leaves_out_the_backlog_and_start_up_by_schedule_and_the_window_bounds_it() -> None:
    faces = _faces()
    # Frame 5's face was scheduled in the backlog, its identify event began after the warm-up: it goes with its face.
    events = [_event(5), _event(75), _event(120)]
    kept, kept_events = after_warmup(faces, events, 2.0)
    # The first identity was delivered at 5,000 ms: faces scheduled from 7,000 ms on count.
    assert [face.scheduled_ns // MS for face in kept] == list(range(7000, 15000, 100))
    assert [event["frame_index"] for event in kept_events] == [75, 120]
    windowed, windowed_events = after_warmup(faces, events, 2.0, window_s=4.0)  # 7,000 to 11,000 ms
    assert [face.scheduled_ns // MS for face in windowed] == list(range(7000, 11000, 100))
    assert [event["frame_index"] for event in windowed_events] == [75]
    assert after_warmup(faces, events, 0.0) == (faces, events)  # no warm-up: every face
    assert after_warmup([], events, 2.0) == ([], events)


def test_the_summary_holds_the_windows_end_to_end_quantiles() -> None:
    whole, window = Evaluation(run_id="r"), Evaluation(run_id="r")
    measure_latency(whole, _faces(), [])
    measure_latency(window, *after_warmup(_faces(), [], 2.0), 2.0)
    everything, steady = whole.summary()["end_to_end_ms"], window.summary()["end_to_end_ms"]
    assert everything["faces"] == 110 and steady["faces"] == 80
    assert everything["p99"] > 4000  # the backlog's seconds are in its tail
    assert steady["p50"] == pytest.approx(50, rel=0.01) and steady["p90"] == pytest.approx(50, rel=0.01)
    assert steady["max"] == pytest.approx(400, rel=0.01) and steady["mean"] == pytest.approx(50 + 350 / 80)
    summary = window.summary()
    assert json.loads(json.dumps(summary)) == summary and summary["warmup_s"] == 2.0
    assert Evaluation(run_id="none").summary()["end_to_end_ms"] is None  # no face identified


def test_a_face_its_track_reported_late_is_timed_apart_from_the_frames_latency() -> None:
    steady = [identity(scheduled, 50) for scheduled in range(0, 1000, 100)]
    late = [replace(identity(scheduled, 700), face_index=-8) for scheduled in (200, 300)]  # found again 600 ms on
    evaluation = Evaluation(run_id="r")
    measure_latency(evaluation, steady + late, [])
    assert evaluation.latency_ms["end_to_end"].count == 10
    assert evaluation.latency_ms["end_to_end"].p99_ms == pytest.approx(50, rel=0.01)
    assert evaluation.latency_ms["reported_late"].count == 2
    assert evaluation.summary()["end_to_end_ms"]["max"] == pytest.approx(50, rel=0.01)
