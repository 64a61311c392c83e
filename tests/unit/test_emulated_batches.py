"""The emulated identify forms the batches the real one does, given the same arrivals: both run the same loop and
dynamic batcher, and the emulated compute takes the time the real compute's calibrated curve gives a batch.

Kafka is faked at the transport's interface (faces arrive on a script, by the wall clock); the real side is FaceNet
with a gallery's SVM. The arrivals fall in the middle of a batch's compute, so the next batch holds exactly the
faces that came during it, for either side, with half a batch's time to spare against noise.
"""

from __future__ import annotations

import random
import time

import cv2
import numpy as np

from emulation.calibrate import time_batches
from emulation.curves import BatchCurve
from emulation.profile import paper_profile
from emulation.workers import EmulatedIdentifier
from pipeline.gallery import Gallery
from pipeline.identify import FaceNetIdentifier, identify_loop
from pipeline.schema import FaceMessage, FaceMeta, decode_face, encode_face
from pipeline.transport import Record
from pipeline.transport.batcher import BatchPolicy
from telemetry.timing import Stopwatch
from tests.fakes import FakeConsumer, FakeProducer
from tests.recording import RecordingSink

MAX_BATCH = 8


class ScriptedConsumer(FakeConsumer):
    """Faces that arrive at set times after the first poll; a poll returns what has arrived, up to its maximum."""

    def __init__(self, arrivals: list[tuple[float, list[Record]]]) -> None:
        super().__init__()
        self.arrivals, self.started, self.queued = arrivals, None, []

    def assigned(self) -> bool:
        return True

    def poll_batch(self, max_records: int, timeout_s: float) -> list[Record]:
        self.started = self.started or time.monotonic()
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic() - self.started
            while self.arrivals and self.arrivals[0][0] <= now:
                self.queued += self.arrivals.pop(0)[1]
            if self.queued or time.monotonic() >= deadline:
                taken, self.queued = self.queued[:max_records], self.queued[max_records:]
                return taken
            time.sleep(0.001)


def _thumbnails(count: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [cv2.imencode(".png", cv2.GaussianBlur(rng.integers(0, 255, (160, 160, 3), np.uint8), (9, 9), 0))[1]
            .tobytes() for _ in range(count)]


def _records(thumbnails: list[bytes]) -> list[Record]:
    now = time.time_ns()
    records = []
    for frame, thumbnail in enumerate(thumbnails):
        meta = FaceMeta("run", "cam-1", frame, 0, 1, (0, 0, 160, 160), 1.0, "png", *[now] * 6)
        _, value, headers = encode_face(FaceMessage(meta, thumbnail))
        records.append(Record("faces", 0, frame, None, value, headers))
    return records


def _batches_formed(identify_faces, arrivals: list[tuple[float, int]], thumbnails: list[bytes]) -> list[int]:
    records, script, used = _records(thumbnails), [], 0
    for at_s, count in arrivals:
        script.append((at_s, records[used:used + count]))
        used += count
    consumer, sink = ScriptedConsumer(script), RecordingSink()
    deadline = time.monotonic() + 30

    def identified() -> list[int]:  # a batch's faces share its compute's start: their sizes, in order
        starts = [event.wall_start_ns for event in sink.events if event.stage == "identify"]
        return [starts.count(start) for start in sorted(set(starts))]

    identify_loop(consumer, FakeProducer(), identify_faces, sink,
                  lambda: sum(identified()) >= used or time.monotonic() > deadline, BatchPolicy(max_batch=MAX_BATCH))
    return identified()


def test_the_emulated_identify_forms_the_real_ones_batches_from_the_same_arrivals(embedder) -> None:
    gallery = Gallery(np.eye(4, 128, dtype=np.float32), np.array(["a", "a", "b", "b"]), embedder.weights_sha256)
    real = FaceNetIdentifier(embedder, gallery)
    thumbnails = _thumbnails(24)
    faces = [decode_face(record.value, record.headers) for record in _records(thumbnails)]

    def run(batch: int) -> None:
        real(faces[:batch], Stopwatch())

    points, _ = time_batches(run, (1, 3, 8), repeats=3)
    curve = BatchCurve("this-cpu", "identify", tuple(points))
    one, three = curve.ms(1) / 1000, curve.ms(3) / 1000
    # 1 face alone; 3 arrive during its compute; 11 during the 3's (a full batch, then the rest); 2 long after
    arrivals = [(0.0, 1), (one / 2, 3), (one + three / 2, 11), (one + three + curve.ms(8) / 1000 + 1.0, 2)]
    expected = [1, 3, 8, 3, 2]
    assert _batches_formed(real, arrivals, thumbnails) == expected
    emulated = EmulatedIdentifier(paper_profile(), 1.0, random.Random(1), curve)
    assert _batches_formed(emulated, arrivals, thumbnails) == expected
