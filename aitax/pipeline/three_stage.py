"""The three-stage design (the paper's Fig. 3a): ingestion and detection in separate processes, frames through Kafka.

Ingestion publishes each resized frame to the `frames` topic as JPEG, spread frame by frame over the partitions
(detection takes each frame on its own, so the detect processes share the load whatever the streams; `stream` keying
keeps a stream in order on one partition instead), and logs the ingest event itself. Detection consumes the topic in
a group, decodes each frame and runs the same `detect_loop` as the two-stage container; its offsets are committed
only once the faces of the frames before them are acknowledged, so a crash redelivers frames rather than losing
them. A record that does not decode goes to the dead-letter topic with its reason. Time a frame spends in Kafka
shows as `frame_queue`. The emulator sends `synthetic` frames instead: random bytes of a measured JPEG's size, which
detection does not decode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from aitax.pipeline.schema import (
    DEFAULT_TOPICS,
    FrameMessage,
    FrameMeta,
    MalformedRecordError,
    Topics,
    dead_letter_headers,
    decode_frame,
    encode_frame,
)
from aitax.pipeline.stream import Frame
from aitax.pipeline.transport import Consumer, DeliveryReport, Producer
from aitax.pipeline.transport.base import next_offsets
from aitax.pipeline.transport.batcher import BatchPolicy, DynamicBatcher
from aitax.telemetry.events import Event
from aitax.telemetry.latency import broker_wait_edges
from aitax.telemetry.sinks import EventSink
from aitax.telemetry.timing import Stopwatch

FRAME_JPEG_QUALITY = 90
# At most, per batch: their faces are acknowledged and their offsets committed together.
FRAME_BATCHING = BatchPolicy(max_batch=4)


@dataclass
class IngestStats:
    frames: int = 0
    acknowledged: int = 0
    bytes_sent: int = 0
    failed: list[str] = field(default_factory=list)

    def on_delivery(self, report: DeliveryReport) -> None:
        if report.error is None:
            self.acknowledged += 1
        else:
            self.failed.append(report.error)


def encode_pixels(rgb: np.ndarray, quality: int = FRAME_JPEG_QUALITY) -> bytes:
    import cv2

    ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("frame encoding failed")
    return encoded.tobytes()


# How ingestion encodes a frame for the wire: (pixels, encoding of FRAME_ENCODINGS).
FrameEncoder = Callable[[np.ndarray], tuple[bytes, str]]


def jpeg_frames(quality: int = FRAME_JPEG_QUALITY) -> FrameEncoder:
    return lambda rgb: (encode_pixels(rgb, quality), "jpeg")


def decode_pixels(message: FrameMessage) -> np.ndarray:
    if message.meta.encoding == "synthetic":  # the emulator's (its image has no OpenCV): only size and timing matter
        return np.zeros((message.meta.height, message.meta.width, 3), np.uint8)
    import cv2

    bgr = cv2.imdecode(np.frombuffer(message.pixels, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None or bgr.shape[:2] != (message.meta.height, message.meta.width):
        raise MalformedRecordError(f"frame does not decode as a {message.meta.width}x{message.meta.height} "
                                   f"{message.meta.encoding}")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def ingest_loop(frames: Iterable[Frame], producer: Producer, sink: EventSink, run_id: str, where: dict[str, str],
                topics: Topics = DEFAULT_TOPICS, encode: FrameEncoder | None = None,
                acceleration_factor: float = 1.0, stats: IngestStats | None = None,
                keying: str = "frame") -> IngestStats:
    """Publish every frame (acks=all) and log its ingest event: its compute is decoding, resizing and encoding
    (sending is in its sub-steps, not its compute, as in the two-stage design)."""
    stats = stats if stats is not None else IngestStats()
    encode = encode or jpeg_frames()
    for frame in frames:
        watch = Stopwatch()
        watch.add("decode", frame.decode_ms)
        watch.add("resize", frame.resize_ms)
        with watch.time("encode"):
            pixels, encoding = encode(frame.rgb)
        height, width = frame.rgb.shape[:2]
        meta = FrameMeta(run_id=run_id, stream_id=frame.stream_id, frame_index=frame.index, width=width,
                         height=height, encoding=encoding, scheduled_ns=frame.scheduled_ns,
                         captured_ns=frame.captured_ns,
                         ingested_ns=time.time_ns(), decode_ms=frame.decode_ms, resize_ms=frame.resize_ms)
        with watch.time("kafka"):
            key, value, headers = encode_frame(FrameMessage(meta, pixels), keying)
            producer.send(topics.frames, value, key=key, headers=headers, on_delivery=stats.on_delivery)
            producer.poll(0)
        stats.frames += 1
        stats.bytes_sent += len(value)
        if sink.enabled:
            sink.emit(Event(stage="ingest", run_id=run_id, stream_id=frame.stream_id, frame_index=frame.index,
                            wall_start_ns=frame.captured_ns, wall_end_ns=meta.ingested_ns,
                            scheduled_ns=frame.scheduled_ns,
                            compute_time_ms=frame.decode_ms + frame.resize_ms + watch.ms["encode"],
                            data_size_bytes=len(value), kafka_client=producer.client_name,
                            acceleration_factor=acceleration_factor,
                            substeps_ms=watch.with_other((meta.ingested_ns - frame.captured_ns) / 1e6), **where))
    producer.flush(300)
    producer.poll(0)
    return stats


@dataclass
class ReceivedFrames:
    """What the detect side read: frames handed to detection, records dead-lettered."""

    frames: int = 0
    dead_letters: int = 0
    other_runs: int = 0  # frames of other runs left in the topic, skipped


def frames_from_topic(consumer: Consumer, producer: Producer, should_stop: Callable[[], bool],
                      topics: Topics = DEFAULT_TOPICS, on_ready: Callable[[], None] | None = None,
                      received: ReceivedFrames | None = None, run_id: str | None = None,
                      batching: BatchPolicy = FRAME_BATCHING) -> Iterator[Frame]:
    """The `frames` topic as detection's frames, in the batches the dynamic batcher forms, until `should_stop()`.
    Before the next batch, the previous one's faces are flushed and then its offsets committed: nothing is
    committed that is not durable downstream. With a `run_id`, frames of other runs are skipped (and committed);
    each frame keeps the run that ingested it, and its wait's edges."""
    received = received if received is not None else ReceivedFrames()
    batcher = DynamicBatcher(consumer, batching)
    while not should_stop():
        batch = batcher.next_batch()
        records = batch.records
        if on_ready is not None and (records or consumer.assigned()):
            on_ready()
            on_ready = None
        for record, fetched_ns in zip(records, batch.fetched_ns, strict=True):
            started = time.perf_counter()
            try:
                message = decode_frame(record.value, record.headers)
                if run_id is not None and message.meta.run_id != run_id:
                    # A new group starts at the topic's oldest frame: earlier runs' frames are not this run's work
                    received.other_runs += 1
                    continue
                rgb = decode_pixels(message)
            except MalformedRecordError as error:
                producer.send(topics.dlq, record.value or b"", key=record.key,
                              headers=dead_letter_headers(record.headers, str(error), record.topic, record.partition,
                                                          record.offset))
                received.dead_letters += 1
                continue
            meta = message.meta
            received.frames += 1
            appended, requested = broker_wait_edges(meta.ingested_ns, record.appended_ns, batch.requested_ns,
                                                    fetched_ns)
            yield Frame(meta.stream_id, meta.frame_index, rgb, meta.captured_ns, meta.ingested_ns, meta.decode_ms,
                        meta.resize_ms, meta.scheduled_ns, received_decode_ms=(time.perf_counter() - started) * 1000,
                        run_id=meta.run_id, appended_ns=appended, requested_ns=requested, fetched_ns=fetched_ns)
        if records:
            producer.flush(300)
            consumer.commit(next_offsets(records))
