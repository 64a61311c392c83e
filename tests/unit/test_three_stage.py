"""The three-stage design's frame hand-off through Kafka, at the transport boundary (faked here; the integration
suite runs it on real brokers): frames decode into the detect loop's frames, a record that does not decode is
dead-lettered, and offsets are committed only after the faces produced so far are flushed."""

from __future__ import annotations

import cv2
import numpy as np

from aitax.pipeline.schema import FrameMessage, FrameMeta, decode_frame, encode_frame
from aitax.pipeline.three_stage import decode_pixels, encode_pixels, frames_from_topic
from aitax.pipeline.transport import Record


class Log:
    def __init__(self) -> None:
        self.calls: list[tuple] = []


class FakeProducer:
    client_name = "fake"

    def __init__(self, log: Log) -> None:
        self.log = log

    def send(self, topic, value, key=None, headers=None, on_delivery=None, opaque=None, partition=None) -> None:
        self.log.calls.append(("send", topic, headers.get("aitax.dlq.reason", b"").decode()))

    def poll(self, timeout_s: float = 0.0) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> int:
        self.log.calls.append(("flush",))
        return 0


class FakeConsumer:
    client_name = "fake"

    def __init__(self, log: Log, batches: list[list[Record]]) -> None:
        self.log, self.batches, self.buffered = log, batches, []

    def poll_batch(self, max_records: int, timeout_s: float) -> list[Record]:
        """A waiting poll receives the next batch from the brokers; any poll returns what is buffered."""
        if timeout_s and self.batches:
            self.buffered += self.batches.pop(0)
        taken, self.buffered = self.buffered[:max_records], self.buffered[max_records:]
        return taken

    def commit(self, positions, asynchronous: bool = False) -> None:
        self.log.calls.append(("commit", dict(positions)))

    def assigned(self) -> bool:
        return True

    def on_revoke(self, handler) -> None:
        pass


def _record(offset: int, rgb: np.ndarray | None, run_id: str = "r") -> Record:
    meta = FrameMeta(run_id=run_id, stream_id="cam-1", frame_index=offset, width=64, height=48, encoding="jpeg",
                     scheduled_ns=1, captured_ns=2, ingested_ns=3, decode_ms=1.0, resize_ms=0.5)
    pixels = encode_pixels(rgb) if rgb is not None else b"not a jpeg"
    key, value, headers = encode_frame(FrameMessage(meta, pixels))
    return Record("frames", 0, offset, key, value, headers)


def test_frames_reach_detection_bad_ones_are_dead_lettered_and_commits_follow_the_flush() -> None:
    rgb = cv2.GaussianBlur(np.random.default_rng(1).integers(0, 256, (48, 64, 3), dtype=np.uint8), (5, 5), 2)
    log = Log()
    consumer = FakeConsumer(log, [[_record(10, rgb)], [_record(11, None), _record(12, rgb)]])
    polls = iter(range(3))
    frames = list(frames_from_topic(consumer, FakeProducer(log), lambda: next(polls, 3) >= 2))
    assert [(f.stream_id, f.index, f.rgb.shape, f.decode_ms) for f in frames] == [("cam-1", 10, (48, 64, 3), 1.0),
                                                                                    ("cam-1", 12, (48, 64, 3), 1.0)]
    assert np.abs(frames[0].rgb.astype(int) - rgb).mean() < 8  # JPEG q90 of noise; swapped channels give ~40
    assert all(f.received_decode_ms > 0 for f in frames)
    assert log.calls == [("flush",), ("commit", {("frames", 0): 11}),
                         ("send", "faces.dlq", "frame does not decode as a 64x48 jpeg"),
                         ("flush",), ("commit", {("frames", 0): 13})]


def test_pixels_round_trip() -> None:
    rgb = np.full((48, 64, 3), (200, 30, 90), np.uint8)
    meta = FrameMeta(run_id="r", stream_id="s", frame_index=0, width=64, height=48, encoding="jpeg",
                     scheduled_ns=0, captured_ns=0, ingested_ns=0, decode_ms=0.0, resize_ms=0.0)
    assert np.abs(decode_pixels(FrameMessage(meta, encode_pixels(rgb))).astype(int) - rgb).max() <= 3


def test_the_emulators_frames_are_measured_jpeg_sizes_of_random_bytes_never_decoded() -> None:
    """The emulated three-stage ingest sends what a frame weighs, not what it shows; detection takes it as is."""
    import random

    from aitax.emulation.profile import FRAME_JPEG_BYTES, frame_jpeg_bytes
    from aitax.emulation.workers import SyntheticFrames
    from aitax.pipeline.stream import Frame
    from aitax.pipeline.three_stage import ingest_loop
    from aitax.telemetry.sinks import NullSink

    sent: list[tuple[str, bytes, dict]] = []

    class Producer(FakeProducer):
        def send(self, topic, value, key=None, headers=None, on_delivery=None, opaque=None, partition=None) -> None:
            sent.append((topic, value, headers))

        def flush(self, timeout_s: float = 30.0) -> int:
            return 0

    frames = [Frame("s-0", i, np.zeros((1, 1, 3), np.uint8), 1, 2, 3.0, 0.0, 0) for i in range(50)]
    stats = ingest_loop(frames, Producer(Log()), NullSink(), "r", {},
                        encode=SyntheticFrames(frame_jpeg_bytes(), random.Random(1)))
    assert stats.frames == 50 and {topic for topic, _, _ in sent} == {"frames"}
    assert all(min(FRAME_JPEG_BYTES) <= len(value) <= max(FRAME_JPEG_BYTES) for _, value, _ in sent)
    assert len({value[:64] for _, value, _ in sent}) > 40  # random bytes, not one buffer again and again
    message = decode_frame(sent[0][1], sent[0][2])
    assert message.meta.encoding == "synthetic" and decode_pixels(message).shape == (1, 1, 3)


def test_a_detect_process_reading_several_streams_counts_their_frames_apart() -> None:
    """Two streams' frame 5 in one detect process: each acknowledgement closes its own stream's frame."""
    from aitax.pipeline.ingest_detect import DetectStats
    from aitax.pipeline.transport import DeliveryReport

    stats = DetectStats(first_frame=5)
    stats.frame_sent("cam-a", 5, 1)
    stats.frame_sent("cam-b", 5, 2)
    stats.on_delivery(DeliveryReport("faces", 0, 1, None, ("cam-b", 5)))
    stats.on_delivery(DeliveryReport("faces", 0, 2, None, ("cam-a", 5)))
    assert (stats.done_through("cam-a"), stats.done_through("cam-b")) == (5, 4)  # cam-b's frame 5 has one left
    stats.on_delivery(DeliveryReport("faces", 0, 3, None, ("cam-b", 5)))
    assert (stats.done_through("cam-b"), stats.acknowledged, stats.failed) == (5, 3, [])


def test_a_detect_process_of_one_run_skips_frames_an_earlier_run_left_in_the_topic() -> None:
    """A new group starts at the oldest frame the topic holds: frames of other runs are committed, not detected,
    and every frame keeps the run that ingested it."""
    from aitax.pipeline.three_stage import ReceivedFrames

    rgb = np.full((48, 64, 3), 90, np.uint8)
    log, received = Log(), ReceivedFrames()
    consumer = FakeConsumer(log, [[_record(10, rgb, "old"), _record(11, rgb, "old"), _record(12, rgb)]])
    polls = iter(range(2))
    frames = list(frames_from_topic(consumer, FakeProducer(log), lambda: next(polls, 2) >= 1, received=received,
                                    run_id="r"))
    assert [(f.index, f.run_id) for f in frames] == [(12, "r")]
    assert (received.frames, received.other_runs) == (1, 2)
    assert log.calls[-1] == ("commit", {("frames", 0): 13})  # the skipped frames are done with too
