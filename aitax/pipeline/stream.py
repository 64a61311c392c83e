"""What ingestion hands detection, and the two things every ingest loop does: keep a frame schedule and hand
frames over a bounded queue. The real ingest process and the emulator's ingest threads share them, and none of
it needs OpenCV, so the emulator image does not carry it."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

PACES = ("native", "max")


@dataclass(frozen=True)
class Frame:
    """A resized RGB frame on its way from ingestion to detection, with ingestion's measurements."""

    stream_id: str
    index: int
    rgb: np.ndarray
    captured_ns: int  # wall clock when decoding of this frame began
    ingested_ns: int  # wall clock when it was resized and handed to detection
    decode_ms: float
    resize_ms: float
    scheduled_ns: int  # when the pacing schedule wanted it: lateness shows up instead of hiding
    # The three-stage design: decoding the frame that came through Kafka, in the detect process.
    received_decode_ms: float = 0.0
    run_id: str = ""  # frames through Kafka carry the run that ingested them; detection keeps it
    # Frames through Kafka: their wait's edges (telemetry.latency.BROKER_WAIT), from ingestion's hand-off on
    appended_ns: int = 0
    requested_ns: int = 0
    fetched_ns: int = 0
    # The decoded picture at its own resolution, when larger than `rgb`: detection finds faces on `rgb` and cuts
    # their thumbnails from here, so a face 40 px high at 960x540 reaches FaceNet from 80 px of a 1080p source
    full: np.ndarray | None = None


def schedule(fps: float, pace: str = "native", start_index: int = 0) -> Iterator[tuple[int, int]]:
    """Frame indices from `start_index` with the wall-clock time each is due, waiting until then (`native`).

    The schedule is fixed at the start: a frame taken late does not push the later ones back, so a loop that
    falls behind shows up as lateness instead of silently offering less load. With `max` there is no schedule:
    a frame is due the moment the loop asks for it."""
    if pace not in PACES:
        raise ValueError(f"pace {pace!r}: expected one of {', '.join(PACES)}")
    period_ns = int(1e9 / fps)
    start_ns = time.time_ns()
    index = start_index
    while True:
        if pace == "max":
            yield index, time.time_ns()
        else:
            due_ns = start_ns + (index - start_index) * period_ns
            delay_s = (due_ns - time.time_ns()) / 1e9
            if delay_s > 0:
                time.sleep(delay_s)
            yield index, due_ns
        index += 1


class BoundedQueue(Protocol):
    """A thread's `queue.Queue` or a process's `multiprocessing.Queue`: both raise `queue.Full` on timeout."""

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None: ...


def hand_off(frames: BoundedQueue, item: object, stopping: Callable[[], bool]) -> bool:
    """Put `item` on a bounded queue, blocking while detection falls behind (that back-pressure is the paper's
    design) but giving up once `stopping()`; True when it was put."""
    while not stopping():
        try:
            frames.put(item, timeout=0.2)
            return True
        except queue.Full:
            continue
    return False
