"""Frame pacing: the schedule a frame's end-to-end latency is measured from."""

from __future__ import annotations

import itertools
from pathlib import Path

import cv2
import numpy as np

from aitax.pipeline.frames import read_frames


def _video(path: Path, frames: int, fps: float) -> str:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (128, 96))
    for index in range(frames):
        writer.write(np.full((96, 128, 3), index * 10 % 255, dtype=np.uint8))
    writer.release()
    return str(path)


def test_native_pace_schedules_frames_one_period_apart(tmp_path: Path) -> None:
    frames = list(read_frames(_video(tmp_path / "v.mp4", 5, 20.0), "cam", (64, 48), pace="native"))
    gaps = {b.scheduled_ns - a.scheduled_ns for a, b in itertools.pairwise(frames)}
    assert gaps == {50_000_000}
    assert all(f.captured_ns >= f.scheduled_ns for f in frames)


def test_max_pace_has_no_schedule_to_fall_behind(tmp_path: Path) -> None:
    # A 1 fps file read flat out: a native schedule would put frame 4 four seconds after frame 0.
    frames = list(read_frames(_video(tmp_path / "v.mp4", 5, 1.0), "cam", (64, 48), pace="max"))
    assert len(frames) == 5
    assert all(f.scheduled_ns == f.captured_ns for f in frames)
