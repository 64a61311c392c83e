"""The emulated identify forms the batches the real one does, given the same arrivals: both run the same loop and
dynamic batcher, and the emulated compute takes the time the real compute's calibrated curve gives a batch.

Kafka is faked at the transport's interface: faces arrive on a script by the wall clock, timed from the start of a
given batch's compute, so noise in one batch does not carry into the next. The real side is FaceNet with a
gallery's SVM. The script makes the batches depend on how long a compute takes: a compute under 0.6 or over 2
times its calibrated time forms other batches.
"""

from __future__ import annotations

import random
import time

import cv2
import numpy as np

from aitax.emulation.calibrate import time_batches
from aitax.emulation.curves import BatchCurve
from aitax.emulation.profile import paper_profile
from aitax.emulation.workers import EmulatedIdentifier
from aitax.pipeline.gallery import Gallery
from aitax.pipeline.identify import FaceNetIdentifier, identify_loop
from aitax.pipeline.schema import FaceMessage, FaceMeta, decode_face, encode_face
from aitax.pipeline.transport import Record
from aitax.pipeline.transport.batcher import BatchPolicy
from aitax.telemetry.timing import Stopwatch
from tests.fakes import FakeConsumer, FakeProducer
from tests.recording import RecordingSink

MAX_BATCH = 8


class ComputeStarts:
    """An identify function that notes when each batch's compute starts."""

    def __init__(self, identify_faces) -> None:
        self.identify_faces, self.starts = identify_faces, []

    def __call__(self, faces, watch):
        self.starts.append(time.monotonic())
        return self.identify_faces(faces, watch)


class ScriptedConsumer(FakeConsumer):
    """Groups of faces, each arriving `delay_s` after the compute of batch `after` (1 = the first) started, or at
    once (`after` 0); a poll returns what has arrived, up to its maximum."""

    def __init__(self, arrivals: list[tuple[int, float, list[Record]]], computes: ComputeStarts) -> None:
        super().__init__()
        self.arrivals, self.computes, self.queued = arrivals, computes, []

    def assigned(self) -> bool:
        return True

    def _arrived(self) -> None:
        while self.arrivals:
            after, delay_s, records = self.arrivals[0]
            starts = self.computes.starts
            if after and (len(starts) < after or time.monotonic() < starts[after - 1] + delay_s):
                return
            self.queued += records
            self.arrivals.pop(0)

    def poll_batch(self, max_records: int, timeout_s: float) -> list[Record]:
        deadline = time.monotonic() + timeout_s
        while True:
            self._arrived()
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


def _batches_formed(identify_faces, arrivals: list[tuple[int, float, int]], thumbnails: list[bytes]) -> list[int]:
    records, script, used = _records(thumbnails), [], 0
    for after, delay_s, count in arrivals:
        script.append((after, delay_s, records[used:used + count]))
        used += count
    computes = ComputeStarts(identify_faces)
    consumer, sink = ScriptedConsumer(script, computes), RecordingSink()
    deadline = time.monotonic() + 30

    def identified() -> list[int]:  # a batch's faces share its compute's start: their sizes, in order
        starts = [event.wall_start_ns for event in sink.events if event.stage == "identify"]
        return [starts.count(start) for start in sorted(set(starts))]

    identify_loop(consumer, FakeProducer(), computes, sink,
                  lambda: sum(identified()) >= used or time.monotonic() > deadline, BatchPolicy(max_batch=MAX_BATCH))
    return identified()


def test_the_emulated_identify_forms_the_real_ones_batches_from_the_same_arrivals(embedder) -> None:
    gallery = Gallery(np.eye(4, 128, dtype=np.float32), np.array(["a", "a", "b", "b"]), embedder.weights_sha256)
    real = FaceNetIdentifier(embedder, gallery)
    thumbnails = _thumbnails(22)
    faces = [decode_face(record.value, record.headers) for record in _records(thumbnails)]

    def run(batch: int) -> None:
        real(faces[:batch], Stopwatch())

    points, _ = time_batches(run, (1, 2, 8), repeats=5)
    curve = BatchCurve("this-cpu", "identify", tuple(points))
    eight = curve.ms(8) / 1000
    # A full batch at once. During its compute two faces arrive, at 0.4 and 0.6 of its time: together they are the
    # next batch (a compute shorter than 0.6 of it takes the first alone). At twice its time a third: a batch of its
    # own (a compute over twice as long would have taken it too). A burst of 11 well after: a full batch, the rest.
    arrivals = [(0, 0.0, 8), (1, 0.4 * eight, 1), (1, 0.6 * eight, 1), (1, 2.0 * eight, 1), (3, 1.0, 11)]
    expected = [8, 2, 1, 8, 3]
    assert _batches_formed(real, arrivals, thumbnails) == expected
    emulated = EmulatedIdentifier(paper_profile(), 1.0, random.Random(1), curve)
    assert _batches_formed(emulated, arrivals, thumbnails) == expected
