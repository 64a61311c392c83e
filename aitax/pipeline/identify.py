"""The identify container: consume thumbnails, embed them with FaceNet in one batched call, classify with
the gallery's SVM, publish identities, and commit offsets only past faces whose results are durable.

Consume-transform-produce is pipelined, at-least-once: results are sent without waiting, their acknowledgements
arrive as delivery reports, and a commit position per partition advances only past a contiguous run of offsets
whose identity (or dead letter) the brokers acknowledged. Positions are committed asynchronously every
`COMMIT_INTERVAL_S`, and synchronously when partitions are revoked and at the end, so no face is lost and no
broker round trip is spent per face. A face redelivered after a crash or rebalance is recognised by its key
and skipped (counted as a duplicate).

The loop takes its compute as a function (`IdentifyFaces`): the real one runs FaceNet + SVM, the emulator's
sleeps. Malformed records go to the dead-letter topic with the reason, and the loop goes on.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from aitax.pipeline.ingest_detect import identity_of_process
from aitax.pipeline.schema import (
    DEFAULT_TOPICS,
    TRACKED,
    UNTRACKED,
    FaceMessage,
    IdentityMessage,
    MalformedRecordError,
    Match,
    Topics,
    dead_letter_headers,
    decode_face,
    encode_identity,
)
from aitax.pipeline.track_names import TrackNames
from aitax.pipeline.transport import CommitRejectedError, Consumer, DeliveryReport, Producer, Record
from aitax.pipeline.transport.base import Partition
from aitax.pipeline.transport.batcher import DEFAULT_BATCHING, Batch, BatchPolicy, DynamicBatcher
from aitax.telemetry.events import Event
from aitax.telemetry.latency import BROKER_WAIT, broker_wait_edges, delivered_ns
from aitax.telemetry.metrics import StageMetrics
from aitax.telemetry.sinks import EventSink
from aitax.telemetry.timing import Stopwatch

# What the compute returns per face: a Match, or a MalformedRecordError for a thumbnail it cannot use.
IdentifyResult = Match | MalformedRecordError
# The identify compute: one result per face, its time recorded into the Stopwatch by sub-step.
IdentifyFaces = Callable[[Sequence[FaceMessage], Stopwatch], list[IdentifyResult]]
RECENT_KEYS = 100_000  # faces remembered for duplicate detection after a rebalance
# How often finished positions are committed: a crash redoes at most this much work (plus what was in flight).
COMMIT_INTERVAL_S = 1.0
FINAL_FLUSH_S = 300.0  # results still in flight at the end or at a revocation: wait out a broker fail-over


class FaceNetIdentifier:
    """The real identify compute: decode, FaceNet embeddings in one batch, then the gallery's decision: on each
    tracked face's track evidence so far (`pipeline.track_names`), or on the face alone (`evidence` "frame", and
    every untracked face). A `tracked` face (no thumbnail) costs no inference: its track's name answers it."""

    def __init__(self, embedder, gallery, evidence: str = "track") -> None:
        self.embedder = embedder
        self.gallery = gallery
        self.tracks = TrackNames(gallery, accumulate=evidence == "track")
        self.precision: str = embedder.precision  # identify events record it

    def __call__(self, faces: Sequence[FaceMessage], watch: Stopwatch) -> list[IdentifyResult]:
        results: list[IdentifyResult | None] = [None] * len(faces)
        images, positions = [], []
        with watch.time("decode"):
            for position, face in enumerate(faces):
                if face.meta.encoding == TRACKED:
                    continue
                image = decode_thumbnail(face)
                if isinstance(image, MalformedRecordError):
                    results[position] = image
                    continue
                images.append(image)
                positions.append(position)
        embeddings = {}
        if images:
            with watch.time("embed"):
                embeddings = dict(zip(positions, self.embedder.embed(np.stack(images)), strict=True))
        with watch.time("svm"):
            untracked = [p for p in positions if faces[p].meta.track_id == UNTRACKED]
            if untracked:
                for position, match in zip(untracked, self.gallery.identify(np.stack([embeddings[p] for p in
                                                                                       untracked])), strict=True):
                    results[position] = match
            for position, face in enumerate(faces):  # in order: a track's faces add up as they were seen
                if results[position] is not None or face.meta.track_id == UNTRACKED:
                    continue
                key = (face.meta.run_id, face.meta.stream_id, face.meta.track_id)
                results[position] = (self.tracks.recall(key) if face.meta.encoding == TRACKED
                                     else self.tracks.name(key, embeddings[position]))
        return results  # type: ignore[return-value]  # every position was answered above


def decode_thumbnail(face: FaceMessage) -> np.ndarray | MalformedRecordError:
    return decode_thumbnail_bytes(face.thumbnail, face.meta.encoding)


def decode_thumbnail_bytes(thumbnail: bytes, encoding: str) -> np.ndarray | MalformedRecordError:
    import cv2  # here, not at the top: the emulator runs identify's loop without OpenCV

    bgr = cv2.imdecode(np.frombuffer(thumbnail, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        return MalformedRecordError(f"thumbnail does not decode as {encoding}")
    if bgr.shape[:2] != (160, 160):
        return MalformedRecordError(f"thumbnail is {bgr.shape[1]}x{bgr.shape[0]}, expected 160x160")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


class OffsetTracker:
    """Commit positions that never pass a record whose results are not yet durable.

    Per partition, the offsets taken in the order polled (a partition's records arrive in offset order) and the
    ones finished out of order; the position is the first unfinished offset, or one past the last taken once
    every taken offset is finished."""

    def __init__(self) -> None:
        self._taken: dict[Partition, deque[int]] = {}
        self._finished: dict[Partition, set[int]] = {}
        self._positions: dict[Partition, int] = {}
        self._committed: dict[Partition, int] = {}

    def take(self, partition: Partition, offset: int) -> None:
        self._taken.setdefault(partition, deque()).append(offset)

    def finish(self, partition: Partition, offset: int) -> None:
        taken = self._taken.get(partition)
        if taken is None:
            return  # revoked meanwhile: its new owner redoes the face
        finished = self._finished.setdefault(partition, set())
        finished.add(offset)
        while taken and taken[0] in finished:
            done = taken.popleft()
            finished.discard(done)
            self._positions[partition] = done + 1

    def due(self, partitions: Sequence[Partition] | None = None, moved_only: bool = True) -> dict[Partition, int]:
        """Positions (of `partitions`, or all) that moved since they were last sent to be committed; every one
        with `moved_only` False (an asynchronous commit may have failed after it was sent)."""
        return {p: position for p, position in self._positions.items()
                if (partitions is None or p in partitions) and not (moved_only and self._committed.get(p) == position)}

    def committed(self, positions: dict[Partition, int]) -> None:
        self._committed.update(positions)

    def forget(self, partitions: Sequence[Partition]) -> None:
        for partition in partitions:
            for state in (self._taken, self._finished, self._positions, self._committed):
                state.pop(partition, None)

    def in_flight(self, partitions: Sequence[Partition] | None = None) -> int:
        return sum(len(taken) for p, taken in self._taken.items() if partitions is None or p in partitions)


@dataclass
class IdentifyStats:
    batches: int = 0
    faces: int = 0  # identities acknowledged by the brokers
    duplicates: int = 0
    dead_letters: int = 0
    other_runs: int = 0  # faces of other runs skipped: an interrupted run's leftovers are not this run's work
    identities: dict[str, int] = field(default_factory=dict)
    commits: int = 0
    commits_rejected: int = 0


class DeliveryFailedError(RuntimeError):
    """A result could not be made durable: offsets stay uncommitted so the faces are processed again."""


@dataclass(frozen=True)
class _Batch:
    """What the faces of one identify call share, for their events."""

    identify_start_ns: int
    identified_ns: int
    compute_ms_per_face: float
    faces: int
    substeps_ms: dict[str, float]
    precision: str | None  # FaceNet's arithmetic in this call, when the compute says (the emulator's has none)


@dataclass(frozen=True)
class _Sent:
    """A result in flight: the record it answers and, for an identity, the face, its batch and its wait."""

    record: Record
    face: FaceMessage | None = None
    identity: str = ""
    batch: _Batch | None = None
    message: IdentityMessage | None = None


class IdentifyWorker:
    """One identify consumer's pipeline: `handle` a poll's records, `settle` acknowledgements and commits.

    The producer may be shared by several workers in one process (fewer clients, fuller batches): whichever
    thread polls it runs every worker's delivery callbacks, so a callback only queues the report, and each
    worker acts on its own reports in its own thread."""

    def __init__(self, consumer: Consumer, producer: Producer, identify_faces: IdentifyFaces, sink: EventSink,
                 acceleration_factor: float = 1.0, stats: IdentifyStats | None = None,
                 topics: Topics = DEFAULT_TOPICS, metrics: StageMetrics | None = None,
                 commit_interval_s: float = COMMIT_INTERVAL_S, run_id: str | None = None) -> None:
        self.consumer, self.producer, self.identify_faces, self.sink = consumer, producer, identify_faces, sink
        self.run_id = run_id  # identify only this run's faces (None: every face)
        self.acceleration_factor, self.topics, self.metrics = acceleration_factor, topics, metrics
        self.stats = stats or IdentifyStats()
        self.commit_interval_s = commit_interval_s
        self.offsets = OffsetTracker()
        self.recent: OrderedDict = OrderedDict()
        self.failures: list[str] = []
        self._reports: deque[DeliveryReport] = deque()  # appended by any thread, taken by this worker's
        self._where = identity_of_process()
        # Work done after a batch's sub-steps were fixed (its Kafka sends, event logging in delivery reports),
        # reported with the next batch: its events may be logged while it is still being sent.
        self._carried_ms: dict[str, float] = {}
        self._next_commit = time.monotonic() + commit_interval_s

    def handle(self, batch: Batch) -> None:
        """Decode, identify and send the results of one batch; nothing here waits for a broker."""
        identify_start_ns = time.time_ns()
        records = batch.records
        fetched_ns = {(r.topic, r.partition, r.offset): t for r, t in zip(records, batch.fetched_ns, strict=True)}
        started = time.perf_counter()
        watch = Stopwatch()
        for name, ms in self._carried_ms.items():
            watch.add(name, ms)
        self._carried_ms = {}
        fresh: list[tuple[Record, FaceMessage]] = []
        dead: list[tuple[Record, str]] = []
        with watch.time("decode"):
            for record in records:
                self.offsets.take((record.topic, record.partition), record.offset)
                try:
                    face = decode_face(record.value, record.headers)
                except MalformedRecordError as error:
                    dead.append((record, str(error)))
                    continue
                if self.run_id is not None and face.meta.run_id != self.run_id:
                    self.stats.other_runs += 1
                    self.offsets.finish((record.topic, record.partition), record.offset)
                    continue
                if face.key in self.recent:
                    self._duplicate(record)  # redelivered after a rebalance: already identified and published
                    continue
                self.recent[face.key] = None
                fresh.append((record, face))
        while len(self.recent) > RECENT_KEYS:
            self.recent.popitem(last=False)
        results = self.identify_faces([face for _, face in fresh], watch) if fresh else []
        identified_ns = time.time_ns()
        compute_ms = (time.perf_counter() - started) * 1000
        named = [(record, face, result) for (record, face), result in zip(fresh, results, strict=True)
                 if not isinstance(result, MalformedRecordError)]
        dead += [(record, str(result)) for (record, _), result in zip(fresh, results, strict=True)
                 if isinstance(result, MalformedRecordError)]
        share = 1 / max(1, len(named))
        substeps = {k: round(v * share, 3) for k, v in watch.with_other((time.perf_counter() - started) * 1000).items()}
        done = _Batch(identify_start_ns, identified_ns, round(compute_ms * share, 3), len(named),
                      substeps, getattr(self.identify_faces, "precision", None))
        sending_started = time.perf_counter()
        for record, face, match in named:
            fetched = fetched_ns[(record.topic, record.partition, record.offset)]
            appended, requested = broker_wait_edges(face.meta.detected_ns, record.appended_ns, batch.requested_ns,
                                                    fetched)
            message = IdentityMessage.answering(face.meta, match, appended_ns=appended, requested_ns=requested,
                                                fetched_ns=fetched, identify_start_ns=identify_start_ns,
                                                identified_ns=identified_ns, batch_size=len(named))
            key, value = encode_identity(message)
            self.producer.send(self.topics.identities, value, key=key, on_delivery=self._reports.append,
                               opaque=_Sent(record, face, match.identity, done, message))
        for record, reason in dead:
            headers = dead_letter_headers(record.headers, reason, record.topic, record.partition, record.offset)
            self.producer.send(self.topics.dlq, record.value or b"", key=record.key, headers=headers,
                               on_delivery=self._reports.append, opaque=_Sent(record))
        self._carry("kafka", (time.perf_counter() - sending_started) * 1000)
        self.stats.batches += 1

    def _carry(self, name: str, ms: float) -> None:
        self._carried_ms[name] = self._carried_ms.get(name, 0.0) + ms

    def settle(self) -> None:
        """Act on the acknowledgements that arrived (logging each identified face) and commit when due."""
        self._acknowledged()
        if self.failures:
            raise DeliveryFailedError(f"{len(self.failures)} result(s) not acknowledged: {self.failures[:1]}")
        if time.monotonic() >= self._next_commit:
            self._commit(asynchronous=True)
            self._next_commit = time.monotonic() + self.commit_interval_s

    def finish(self) -> None:
        """Wait for every result in flight and commit what is finished, synchronously."""
        self._wait_acknowledged(None)
        if self.failures:
            raise DeliveryFailedError(f"{len(self.failures)} result(s) not acknowledged: {self.failures[:1]}")
        self._commit(asynchronous=False)

    def partitions_revoked(self, partitions: list[Partition]) -> None:
        """The group is moving these partitions: make their results durable and commit them while still owned."""
        self._wait_acknowledged(partitions)
        self._commit(asynchronous=False, partitions=partitions)
        self.offsets.forget(partitions)

    def _wait_acknowledged(self, partitions: Sequence[Partition] | None) -> None:
        """Until this worker's results on `partitions` (all: None) are acknowledged or failed: not a flush, which
        on a producer shared with busy workers could wait for theirs forever."""
        deadline = time.monotonic() + FINAL_FLUSH_S
        self._acknowledged()
        while (self.offsets.in_flight(partitions) > len(self.failures) and time.monotonic() < deadline):
            self.producer.poll(0.05)
            self._acknowledged()

    def _commit(self, asynchronous: bool, partitions: Sequence[Partition] | None = None) -> None:
        # A synchronous commit (revocation, the end) repeats every position: the last asynchronous one may have
        # failed, and the group's lag must reach zero.
        positions = self.offsets.due(partitions, moved_only=asynchronous)
        if not positions:
            return
        try:
            self.consumer.commit(positions, asynchronous=asynchronous)
        except CommitRejectedError:
            self.stats.commits_rejected += 1  # the partitions moved: their new owner redoes these, we drop duplicates
            return
        self.offsets.committed(positions)
        self.stats.commits += 1

    def _duplicate(self, record: Record) -> None:
        self.stats.duplicates += 1
        if self.metrics is not None:
            self.metrics.duplicates.inc()
        self.offsets.finish((record.topic, record.partition), record.offset)

    def _acknowledged(self) -> None:
        self.producer.poll(0)
        while self._reports:
            self._delivered(self._reports.popleft())

    def _delivered(self, report: DeliveryReport) -> None:
        sent: _Sent = report.opaque
        if report.error is not None:
            self.failures.append(report.error)
            if self.metrics is not None:
                self.metrics.delivery_failures.inc()
            return
        record = sent.record
        self.offsets.finish((record.topic, record.partition), record.offset)
        if sent.face is None:
            self.stats.dead_letters += 1
            if self.metrics is not None:
                self.metrics.dead_letters.inc()
            return
        self.stats.faces += 1
        self.stats.identities[sent.identity] = self.stats.identities.get(sent.identity, 0) + 1
        if self.sink.enabled:
            logging_started = time.perf_counter()
            self._log_identified(sent, delivered_ns(sent.message.identified_ns, report.timestamp_ms))
            self._carry("events", (time.perf_counter() - logging_started) * 1000)

    def _log_identified(self, sent: _Sent, delivered: int) -> None:
        """The face's broker wait and identify events, once its identity is durable (`delivered`: its append, as
        the delivery report says)."""
        record, face, batch, identity = sent.record, sent.face, sent.batch, sent.message
        meta = face.meta
        common = dict(run_id=meta.run_id, stream_id=meta.stream_id, frame_index=meta.frame_index,
                      face_index=meta.face_index, acceleration_factor=self.acceleration_factor,
                      kafka_client=self.producer.client_name, partition=record.partition, offset=record.offset,
                      **self._where)
        edges = (meta.detected_ns, identity.appended_ns, identity.requested_ns, identity.fetched_ns,
                 identity.identify_start_ns)
        owners = {part: round((end - start) / 1e6, 3)
                  for part, (start, end) in zip(BROKER_WAIT, itertools.pairwise(edges), strict=True)}
        self.sink.emit(Event(stage="broker_wait", wall_start_ns=meta.detected_ns, wall_end_ns=batch.identify_start_ns,
                             compute_time_ms=0.0, broker_append_ns=record.appended_ns,
                             consumer_lag=self.consumer.lag(record), substeps_ms=owners, **common))
        self.sink.emit(Event(stage="identify", wall_start_ns=batch.identify_start_ns, wall_end_ns=batch.identified_ns,
                             compute_time_ms=batch.compute_ms_per_face, face_count=batch.faces,
                             data_size_bytes=len(face.thumbnail), substeps_ms=batch.substeps_ms,
                             precision=batch.precision, delivered_ns=delivered, **common))


def identify_loop(consumer: Consumer, producer: Producer, identify_faces: IdentifyFaces, sink: EventSink,
                  should_stop: Callable[[], bool], batching: BatchPolicy = DEFAULT_BATCHING,
                  acceleration_factor: float = 1.0, stats: IdentifyStats | None = None,
                  topics: Topics = DEFAULT_TOPICS, metrics: StageMetrics | None = None,
                  on_ready: Callable[[], None] | None = None, run_id: str | None = None) -> IdentifyStats:
    """Identify the batches the dynamic batcher forms until `should_stop()`, then wait for the results and commit.

    `on_ready` is called once the group has given this consumer partitions: whoever starts the producers waits
    for it, so the group's formation is not measured as broker wait. With `run_id`, other runs' faces are skipped."""
    worker = IdentifyWorker(consumer, producer, identify_faces, sink, acceleration_factor, stats, topics, metrics,
                            run_id=run_id)
    batcher = DynamicBatcher(consumer, batching, on_revoke=worker.partitions_revoked)
    while not should_stop():
        batch = batcher.next_batch()
        if on_ready is not None and (batch.records or consumer.assigned()):
            on_ready()
            on_ready = None
        if batch.records:
            worker.handle(batch)
        worker.settle()
    worker.finish()
    return worker.stats
