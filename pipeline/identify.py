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
from pipeline.transport import CommitRejectedError, Consumer, DeliveryReport, Producer, Record
from telemetry.events import Event
from telemetry.metrics import StageMetrics
from telemetry.sinks import EventSink
from telemetry.timing import Stopwatch

# What the compute returns per face: (identity, score), or a MalformedRecordError for a thumbnail it cannot use.
IdentifyResult = tuple[str, float] | MalformedRecordError
# The identify compute: one result per face, its time recorded into the Stopwatch by sub-step.
IdentifyFaces = Callable[[Sequence[FaceMessage], Stopwatch], list[IdentifyResult]]
RECENT_KEYS = 100_000  # faces remembered for duplicate detection after a rebalance


class FaceNetIdentifier:
    """The real identify compute: decode, FaceNet embeddings in one batch, SVM against the gallery."""

    def __init__(self, embedder, gallery) -> None:
        self.embedder = embedder
        self.gallery = gallery

    def __call__(self, faces: Sequence[FaceMessage], watch: Stopwatch) -> list[IdentifyResult]:
        results: list[IdentifyResult] = []
        images, positions = [], []
        with watch.time("decode"):
            for position, face in enumerate(faces):
                image = decode_thumbnail(face)
                if isinstance(image, MalformedRecordError):
                    results.append(image)
                    continue
                results.append(("", 0.0))  # filled in below
                images.append(image)
                positions.append(position)
        if images:
            with watch.time("embed"):
                embeddings = self.embedder.embed(np.stack(images))
            with watch.time("svm"):
                named = self.gallery.identify(embeddings)
            for position, (identity, score) in zip(positions, named, strict=True):
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
    logging_ms: float = 0.0  # the last batch's event logging, reported with the next batch
    commits_rejected: int = 0


class DeliveryFailedError(RuntimeError):
    """A result could not be made durable: offsets stay uncommitted so the faces are processed again."""


def identify_batch(records: Sequence[Record], identify_faces: IdentifyFaces, producer: Producer, consumer: Consumer,
                   sink: EventSink, stats: IdentifyStats, recent: OrderedDict, acceleration_factor: float = 1.0,
                   topics: Topics = DEFAULT_TOPICS) -> None:
    """One poll's worth: decode, identify, publish results and dead letters, wait for acks, commit, then log.

    Events are logged only once the batch is committed: a batch that fails is redelivered and logged then."""
    identify_start_ns = time.time_ns()
    started = time.perf_counter()
    watch = Stopwatch()
    watch.add("events", stats.logging_ms)
    fresh: list[tuple[Record, FaceMessage]] = []
    dead: list[tuple[Record, str]] = []
    with watch.time("decode"):
        for record in records:
            try:
                face = decode_face(record.value, record.headers)
            except MalformedRecordError as error:
                dead.append((record, str(error)))
                continue
            if face.key in recent:
                stats.duplicates += 1  # redelivered after a rebalance: already identified and published
                continue
            fresh.append((record, face))
    results = identify_faces([face for _, face in fresh], watch) if fresh else []
    identified_ns = time.time_ns()
    compute_ms = (time.perf_counter() - started) * 1000

    failures: list[str] = []

    def on_delivery(report: DeliveryReport) -> None:
        if report.error is not None:
            failures.append(report.error)

    identified: list[tuple[Record, FaceMessage]] = []
    with watch.time("kafka"):
        for (record, face), result in zip(fresh, results, strict=True):
            if isinstance(result, MalformedRecordError):
                dead.append((record, str(result)))
                continue
            identity, score = result
            meta = face.meta
            message = IdentityMessage(meta.run_id, meta.stream_id, meta.frame_index, meta.face_index, identity,
                                      round(score, 4), meta.box, meta.scheduled_ns, meta.captured_ns,
                                      meta.ingested_ns, meta.detect_start_ns, meta.detected_ns, identify_start_ns,
                                      identified_ns)
            key, value = encode_identity(message)
            producer.send(topics.identities, value, key=key, on_delivery=on_delivery)
            stats.identities[identity] = stats.identities.get(identity, 0) + 1
            identified.append((record, face))
        for record, reason in dead:
            headers = dead_letter_headers(record.headers, reason, record.topic, record.partition, record.offset)
            producer.send(topics.dlq, record.value or b"", key=record.key, headers=headers, on_delivery=on_delivery)
        if producer.flush(300) or failures:
            raise DeliveryFailedError(f"{len(failures)} result(s) not acknowledged: {failures[:1]}")
        try:
            consumer.commit(records)  # only now: every result and dead letter is durable
        except CommitRejectedError:
            stats.commits_rejected += 1  # the partitions moved: their new owner redoes these, we drop duplicates
    for _, face in fresh:
        recent[face.key] = None
        if len(recent) > RECENT_KEYS:
            recent.popitem(last=False)
    stats.batches += 1
    stats.faces += len(identified)
    stats.dead_letters += len(dead)

    logging_started = time.perf_counter()
    share = 1 / max(1, len(identified))
    substeps = {k: round(v * share, 3) for k, v in watch.with_other((time.perf_counter() - started) * 1000).items()}
    where = identity_of_process()
    for record, face in identified:
        meta = face.meta
        common = dict(run_id=meta.run_id, stream_id=meta.stream_id, frame_index=meta.frame_index,
                      face_index=meta.face_index, acceleration_factor=acceleration_factor,
                      kafka_client=producer.client_name, partition=record.partition, offset=record.offset, **where)
        append_ns = record.timestamp_ms * 1_000_000 if record.timestamp_is_broker_append else None
        split = None if append_ns is None else {
            "producer_to_broker": round((append_ns - meta.detected_ns) / 1e6, 3),
            "broker_to_consumer": round((identify_start_ns - append_ns) / 1e6, 3)}
        sink.emit(Event(stage="broker_wait", wall_start_ns=meta.detected_ns, wall_end_ns=identify_start_ns,
                        compute_time_ms=0.0, broker_append_ns=append_ns, consumer_lag=consumer.lag(record),
                        substeps_ms=split, **common))
        sink.emit(Event(stage="identify", wall_start_ns=identify_start_ns, wall_end_ns=identified_ns,
                        compute_time_ms=round(compute_ms * share, 3), face_count=len(identified),
                        data_size_bytes=len(face.thumbnail), substeps_ms=substeps, **common))
    stats.logging_ms = (time.perf_counter() - logging_started) * 1000


def identify_loop(consumer: Consumer, producer: Producer, identify_faces: IdentifyFaces, sink: EventSink,
                  should_stop: Callable[[], bool], max_batch: int = 8, poll_timeout_s: float = 0.5,
                  acceleration_factor: float = 1.0, stats: IdentifyStats | None = None,
                  topics: Topics = DEFAULT_TOPICS, metrics: StageMetrics | None = None) -> IdentifyStats:
    """Poll up to `max_batch` faces at a time until `should_stop()`; each batch is committed after its results."""
    stats = stats or IdentifyStats()
    recent: OrderedDict = OrderedDict()
    while not should_stop():
        records = consumer.poll_batch(max_batch, poll_timeout_s)
        if records:
            before = (stats.dead_letters, stats.duplicates)
            try:
                identify_batch(records, identify_faces, producer, consumer, sink, stats, recent, acceleration_factor,
                               topics)
            except DeliveryFailedError:
                if metrics is not None:
                    metrics.delivery_failures.inc()
                raise
            if metrics is not None:
                metrics.dead_letters.inc(stats.dead_letters - before[0])
                metrics.duplicates.inc(stats.duplicates - before[1])
    return stats
