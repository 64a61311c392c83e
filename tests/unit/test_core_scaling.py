"""The core-scaling study (the paper's Fig. 5): requests it cannot serve are refused in one line, each point runs
the real compute in a process pinned to its core count, and the table and plot report latency relative to one core
beside the paper's."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitax.common.errors import UserError
from aitax.pipeline.core_scaling import CorePoint, check_request, format_table, plot, relative, run_points, usable_cpus


def test_requests_this_machine_cannot_serve_are_refused() -> None:
    too_many = len(usable_cpus()) + 1
    with pytest.raises(UserError, match=f"--cores {too_many}: this machine lets aitax use 1-"):
        check_request(["identify"], [1, too_many])
    with pytest.raises(UserError, match="--cores must include 1"):
        check_request(["identify"], [2])
    with pytest.raises(UserError, match="--kinds detect: expected some of ingest-detect, identify"):
        check_request(["detect"], [1])


def test_latency_is_reported_relative_to_one_core_beside_the_papers(tmp_path: Path) -> None:
    points = [CorePoint("ingest-detect", 1, [20.0, 22.0], 1), CorePoint("ingest-detect", 2, [17.0, 16.0], 2),
              CorePoint("identify", 1, [10.0], 1), CorePoint("identify", 2, [7.0], 2)]
    ratios = relative(points)
    assert ratios[("ingest-detect", 2)] == pytest.approx(16.5 / 21.0)
    assert ratios[("identify", 2)] == pytest.approx(0.7)
    table = format_table(points)
    assert table[2].split()[-2:] == ["0.79", "0.84"] and table[4].split()[-2:] == ["0.70", "0.64"]
    assert plot(points, tmp_path / "cores.png").stat().st_size > 10_000


def test_each_point_runs_the_real_compute_in_a_process_pinned_to_its_cores(assets, tmp_path: Path) -> None:
    from aitax.pipeline.synth_video import make_video

    video = tmp_path / "short.mp4"
    make_video(assets.faces_val_dir, video, seconds=4.0, seed=3)
    points = run_points(["ingest-detect", "identify"], [1], str(video), frames=30, min_face_size=40)
    assert [(p.kind, p.cores, p.cpus_seen) for p in points] == [("ingest-detect", 1, 1), ("identify", 1, 1)]
    detect, identify = points
    assert len(detect.latencies_ms) == 30 and all(ms > 1 for ms in detect.latencies_ms)  # MTCNN ran
    assert identify.latencies_ms and all(ms > 1 for ms in identify.latencies_ms)  # FaceNet ran on found faces


def test_object_detection_is_reported_beside_the_papers_near_linear_scaling(tmp_path: Path) -> None:
    points = [CorePoint("detect-objects", 1, [200.0], 1), CorePoint("detect-objects", 2, [110.0], 2)]
    table = format_table(points)
    assert table[2].split()[-2:] == ["0.55", "0.50"]  # Fig. 12's "near linear": 1/2 on two cores
    assert "Fig. 12" in table[-1]
    assert plot(points, tmp_path / "fig12.png").stat().st_size > 10_000


def test_object_detection_runs_centernet_on_each_frames_jpeg(assets, tmp_path: Path) -> None:
    from aitax.pipeline.synth_video import make_video

    video = tmp_path / "short.mp4"
    make_video(assets.faces_val_dir, video, seconds=2.0, seed=3)
    (point,) = run_points(["detect-objects"], [1], str(video), frames=5, min_face_size=40)
    assert (point.kind, point.cores, point.cpus_seen) == ("detect-objects", 1, 1)
    assert len(point.latencies_ms) == 5 and all(ms > 5 for ms in point.latencies_ms)  # CenterNet ran
