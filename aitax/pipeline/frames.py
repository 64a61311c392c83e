"""Ingestion's input: frames decoded by OpenCV from a file or a stream URL, paced and optionally looped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import cv2
import numpy as np

from aitax.common.errors import UserError
from aitax.pipeline.stream import PACES, Frame, schedule

STREAM_SCHEMES = ("rtsp://", "rtsps://", "http://", "https://", "udp://", "tcp://", "rtmp://")


def open_video(source: str) -> cv2.VideoCapture:
    """Open a file or stream URL; a one-line UserError names what is wrong with it."""
    if not source.startswith(STREAM_SCHEMES):
        path = Path(source)
        if not path.exists():
            raise UserError(f"video {source}: no such file")
        if not path.is_file():
            raise UserError(f"video {source}: not a regular file")
        if path.stat().st_size == 0:
            raise UserError(f"video {source}: file is empty")
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            raise UserError(f"video {source}: unreadable ({error.strerror})") from None
    capture = cv2.VideoCapture(source)
    if not capture.isOpened():
        raise UserError(f"video {source}: OpenCV cannot open it as a video")
    ok, _ = capture.read()
    if not ok:
        capture.release()
        raise UserError(f"video {source}: no decodable frame (corrupt or not a video)")
    capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
    return capture


def native_fps(capture: cv2.VideoCapture, default: float = 30.0) -> float:
    fps = capture.get(cv2.CAP_PROP_FPS)
    return fps if fps and 1 <= fps <= 240 else default


def read_frames(source: str, stream_id: str, size: tuple[int, int], pace: str = "native", loop: bool = False,
                max_frames: int | None = None, start_frame: int = 0) -> Iterator[Frame]:
    """Decode, convert to RGB and resize frames; `pace=native` keeps the source's frame rate, `max` does not wait.

    With `loop`, a file restarts at its end and frame indices keep counting, so every frame stays unique.
    `start_frame` resumes a file where a previous run stopped (indices continue from it)."""
    if pace not in PACES:
        raise UserError(f"--pace {pace!r}: expected {' or '.join(PACES)}")
    capture = open_video(source)
    if start_frame:
        length = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        if source.startswith(STREAM_SCHEMES) or length <= 0:
            raise UserError(f"video {source}: a live stream cannot resume at frame {start_frame}")
        if start_frame >= length and not loop:
            return
        capture.set(cv2.CAP_PROP_POS_FRAMES, start_frame % length)
    slots = schedule(native_fps(capture), pace, start_frame)
    try:
        for index, scheduled_ns in islice(slots, max_frames):
            captured_ns = scheduled_ns if pace == "max" else time.time_ns()
            started = time.perf_counter()
            ok, bgr = capture.read()
            if not ok and loop and index > 0:
                capture.release()
                capture = open_video(source)
                ok, bgr = capture.read()
            if not ok:
                return
            yield to_frame(bgr, stream_id, index, size, captured_ns, scheduled_ns, started)
    finally:
        capture.release()


def to_frame(bgr: np.ndarray, stream_id: str, index: int, size: tuple[int, int], captured_ns: int,
             scheduled_ns: int, read_started: float) -> Frame:
    """A decoded picture as detection takes it: RGB at `size` (and at its own resolution, when larger, for the
    thumbnails), with its decode time (since `read_started`, a perf_counter) and resize time."""
    from aitax.pipeline.crop import resize_frame

    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    decoded = time.perf_counter()
    resized = resize_frame(rgb, *size)
    finished = time.perf_counter()
    return Frame(stream_id, index, resized, captured_ns, time.time_ns(), (decoded - read_started) * 1000,
                 (finished - decoded) * 1000, scheduled_ns, full=rgb if rgb.shape[1] > size[0] else None)
