"""The identify container: consume thumbnails, embed them with FaceNet in one batched call, classify with
the gallery's SVM, publish identities, and only then commit offsets (at-least-once: nothing is lost).

The loop takes its compute as a function (`IdentifyFaces`): the real one runs FaceNet + SVM, the emulator's
sleeps. Malformed records go to the dead-letter topic with the reason, and the loop goes on.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from pipeline.ingest_detect import identity_of_process
from pipeline.schema import (
    DEFAULT_TOPICS,
    FaceMessage,
    IdentityMessage,
    MalformedRecordError,
    Topics,
    dead_letter_headers,
    decode_face,
    encode_identity,
)
from pipeline.transport import Consumer, DeliveryReport, Producer, Record
from telemetry.events import Event
from telemetry.sinks import EventSink

# What the compute returns per face: (identity, score), or a MalformedRecordError for a thumbnail it cannot use.
IdentifyResult = tuple[str, float] | MalformedRecordError
IdentifyFaces = Callable[[Sequence[FaceMessage]], list[IdentifyResult]]
RECENT_KEYS = 100_000  # faces remembered for duplicate detection after a rebalance


class FaceNetIdentifier:
    """The real identify compute: decode, FaceNet embeddings in one batch, SVM against the gallery."""

    def __init__(self, embedder, gallery) -> None:
        self.embedder = embedder
        self.gallery = gallery

    def __call__(self, faces: Sequence[FaceMessage]) -> list[IdentifyResult]:
        results: list[IdentifyResult] = []
        images, positions = [], []
        for position, face in enumerate(faces):
            image = decode_thumbnail(face)
            if isinstance(image, MalformedRecordError):
                results.append(image)
                continue
            results.append(("", 0.0))  # filled in below
            images.append(image)
            positions.append(position)
        if images:
            embeddings = self.embedder.embed(np.stack(images))
            for position, (identity, score) in zip(positions, self.gallery.identify(embeddings), strict=True):
                results[position] = (identity, float(score))
        return results


def decode_thumbnail(face: FaceMessage) -> np.ndarray | MalformedRecordError:
    bgr = cv2.imdecode(np.frombuffer(face.thumbnail, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        return MalformedRecordError(f"thumbnail does not decode as {face.meta.encoding}")
    if bgr.shape[:2] != (160, 160):
        return MalformedRecordError(f"thumbnail is {bgr.shape[1]}x{bgr.shape[0]}, expected 160x160")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


@dataclass
class IdentifyStats:
    batches: int = 0
    faces: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    identities: dict[str, int] = field(default_factory=dict)


class DeliveryFailedError(RuntimeError):
    """A result could not be made durable: offsets stay uncommitted so the faces are processed again."""


def identify_batch(records: Sequence[Record], identify_faces: IdentifyFaces, producer: Producer, consumer: Consumer,
                   sink: EventSink, stats: IdentifyStats, recent: OrderedDict, acceleration_factor: float = 1.0,
                   lag: int | None = None, topics: Topics = DEFAULT_TOPICS) -> None:
    """One poll's worth: decode, identify, publish results and dead letters, wait for acks, then commit."""
    identify_start_ns = time.time_ns()
    faces: list[tuple[Record, FaceMessage]] = []
    dead: list[tuple[Record, str]] = []
    for record in records:
        try:
            faces.append((record, decode_face(record.value, record.headers)))
        except MalformedRecordError as error:
            dead.append((record, str(error)))
    fresh = []
    for record, face in faces:
        if face.key in recent:
            stats.duplicates += 1  # redelivered after a rebalance: already identified and published
            continue
        fresh.append((record, face))
    started = time.perf_counter()
    results = identify_faces([face for _, face in fresh]) if fresh else []
    compute_ms = (time.perf_counter() - started) * 1000
    identified_ns = time.time_ns()

    failures: list[str] = []

    def on_delivery(report: DeliveryReport) -> None:
        if report.error is not None:
            failures.append(report.error)

    where = identity_of_process()
    per_face_ms = compute_ms / max(1, len(fresh))
    identified = 0
    for (record, face), result in zip(fresh, results, strict=True):
        if isinstance(result, MalformedRecordError):
            dead.append((record, str(result)))
            continue
        identity, score = result
        identified += 1
        meta = face.meta
        message = IdentityMessage(meta.run_id, meta.stream_id, meta.frame_index, meta.face_index, identity,
                                  round(score, 4), meta.box, meta.captured_ns, meta.detected_ns, identify_start_ns,
                                  identified_ns)
        key, value = encode_identity(message)
        producer.send(topics.identities, value, key=key, on_delivery=on_delivery)
        stats.identities[identity] = stats.identities.get(identity, 0) + 1
        common = dict(run_id=meta.run_id, stream_id=meta.stream_id, frame_index=meta.frame_index,
                      face_index=meta.face_index, acceleration_factor=acceleration_factor,
                      kafka_client=producer.client_name, partition=record.partition, offset=record.offset, **where)
        broker_append_ns = record.timestamp_ms * 1_000_000 if record.timestamp_is_broker_append else None
        sink.emit(Event(stage="broker_wait", wall_start_ns=meta.detected_ns, wall_end_ns=identify_start_ns,
                        compute_time_ms=0.0, broker_append_ns=broker_append_ns, consumer_lag=lag, **common))
        sink.emit(Event(stage="identify", wall_start_ns=identify_start_ns, wall_end_ns=identified_ns,
                        compute_time_ms=per_face_ms, face_count=len(fresh), data_size_bytes=len(face.thumbnail),
                        **common))
    for record, reason in dead:
        headers = dead_letter_headers(record.headers, reason, record.topic, record.partition, record.offset)
        producer.send(topics.dlq, record.value or b"", key=record.key, headers=headers, on_delivery=on_delivery)
    if producer.flush(300) or failures:
        raise DeliveryFailedError(f"{len(failures)} result(s) not acknowledged: {failures[:1]}")
    consumer.commit(records)  # only now: every result and dead letter is durable
    for _, face in fresh:
        recent[face.key] = None
        if len(recent) > RECENT_KEYS:
            recent.popitem(last=False)
    stats.batches += 1
    stats.faces += identified
    stats.dead_letters += len(dead)


def identify_loop(consumer: Consumer, producer: Producer, identify_faces: IdentifyFaces, sink: EventSink,
                  should_stop: Callable[[], bool], max_batch: int = 8, poll_timeout_s: float = 0.5,
                  acceleration_factor: float = 1.0, stats: IdentifyStats | None = None,
                  topics: Topics = DEFAULT_TOPICS) -> IdentifyStats:
    """Poll up to `max_batch` faces at a time until `should_stop()`; each batch is committed after its results."""
    stats = stats or IdentifyStats()
    recent: OrderedDict = OrderedDict()
    while not should_stop():
        records = consumer.poll_batch(max_batch, poll_timeout_s)
        if records:
            identify_batch(records, identify_faces, producer, consumer, sink, stats, recent, acceleration_factor,
                           topics=topics)
    return stats
