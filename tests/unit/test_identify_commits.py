"""The pipelined identify path: commit positions never pass a face whose result is not durable.

Kafka is faked here (a unit test of the commit logic); tests/integration and the fault scenarios run it on brokers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from aitax.pipeline.identify import DeliveryFailedError, IdentifyStats, IdentifyWorker, OffsetTracker
from aitax.pipeline.schema import FaceMessage, FaceMeta, Match, encode_face
from aitax.pipeline.transport import Record
from aitax.pipeline.transport.batcher import Batch, DynamicBatcher
from aitax.telemetry.sinks import NullSink
from aitax.telemetry.timing import Stopwatch
from tests.fakes import FakeConsumer, FakeProducer
from tests.recording import RecordingSink

P0, P1 = ("faces", 0), ("faces", 1)


def test_position_stops_at_the_first_unfinished_offset() -> None:
    tracker = OffsetTracker()
    for offset in range(5):
        tracker.take(P0, offset)
    tracker.finish(P0, 1)
    tracker.finish(P0, 2)
    assert tracker.due() == {}  # offset 0 is still in flight
    tracker.finish(P0, 0)
    assert tracker.due() == {P0: 3}
    tracker.committed({P0: 3})
    tracker.finish(P0, 4)
    assert tracker.due() == {}
    tracker.finish(P0, 3)
    assert tracker.due() == {P0: 5}
    assert tracker.in_flight() == 0


def test_partitions_are_independent_and_forgotten_on_revoke() -> None:
    tracker = OffsetTracker()
    tracker.take(P0, 10)
    tracker.take(P1, 7)
    tracker.finish(P1, 7)
    assert tracker.due() == {P1: 8}
    assert tracker.due([P0]) == {}
    tracker.forget([P0])
    tracker.finish(P0, 10)  # a late acknowledgement for a partition no longer owned
    assert tracker.due() == {P1: 8}


def _record(partition: int, offset: int, frame: int, run_id: str = "run") -> Record:
    now = time.time_ns()
    meta = FaceMeta(run_id, "cam-1", frame, 0, 1, (0, 0, 160, 160), 1.0, "synthetic", now, now, now, now, now, now)
    _, value, headers = encode_face(FaceMessage(meta, b"thumbnail"))
    return Record("faces", partition, offset, None, value, headers)


def _name_all(faces: Sequence[FaceMessage], watch: Stopwatch):
    return [Match("alice", 1.0, "alice") for _ in faces]


def _worker(producer: FakeProducer, consumer: FakeConsumer, run_id: str | None = None) -> IdentifyWorker:
    worker = IdentifyWorker(consumer, producer, _name_all, NullSink(), stats=IdentifyStats(), commit_interval_s=0.0,
                            run_id=run_id)
    DynamicBatcher(consumer, on_revoke=worker.partitions_revoked)  # as identify_loop wires them
    return worker


def _batch(records: list[Record]) -> Batch:
    now = time.time_ns()
    return Batch(records, now, [now] * len(records))


def test_nothing_is_committed_before_its_result_is_acknowledged() -> None:
    producer, consumer = FakeProducer(), FakeConsumer()
    worker = _worker(producer, consumer)
    worker.handle(_batch([_record(0, offset, offset) for offset in range(4)]))
    assert consumer.commits == [] and len(producer.pending) == 4  # sent, not waited for
    producer.reverse = True  # acknowledgements may arrive in any order
    worker.settle()
    assert consumer.commits == [({P0: 4}, True)]  # one asynchronous commit for the four faces
    assert worker.stats.faces == 4 and worker.stats.identities == {"alice": 4}


def test_a_failed_result_holds_its_offset_back_and_stops_the_loop() -> None:
    producer, consumer = FakeProducer(), FakeConsumer()
    worker = _worker(producer, consumer)
    producer.errors = {1: "broker gone"}
    worker.handle(_batch([_record(0, offset, offset) for offset in range(3)]))
    with pytest.raises(DeliveryFailedError, match="broker gone"):
        worker.settle()
    assert all(positions.get(P0, 0) <= 1 for positions, _ in consumer.commits)
    assert worker.offsets.due() == {P0: 1}  # the face at offset 1 is processed again after a restart


def test_revocation_commits_the_revoked_partitions_synchronously() -> None:
    producer, consumer = FakeProducer(), FakeConsumer()
    worker = _worker(producer, consumer)
    worker.handle(_batch([_record(0, 5, 1), _record(1, 9, 2)]))
    consumer.revoke([P1])  # inside poll: the results are flushed first, then committed while still owned
    assert consumer.commits == [({P1: 10}, False)]
    assert worker.offsets.due() == {P0: 6}


def test_redelivered_faces_are_skipped_as_duplicates_and_committed() -> None:
    producer, consumer = FakeProducer(), FakeConsumer()
    worker = _worker(producer, consumer)
    worker.handle(_batch([_record(0, 0, 1)]))
    worker.settle()
    worker.handle(_batch([_record(0, 1, 1)]))  # the same face again (a producer retry or a rebalance)
    worker.finish()
    assert worker.stats.duplicates == 1 and worker.stats.faces == 1 and producer.sent == 1
    assert consumer.commits[-1] == ({P0: 2}, False)


def test_the_final_commit_repeats_positions_an_asynchronous_commit_may_have_lost() -> None:
    producer, consumer = FakeProducer(), FakeConsumer()
    worker = _worker(producer, consumer)
    worker.handle(_batch([_record(0, 0, 1), _record(0, 1, 2)]))
    worker.settle()
    assert consumer.commits == [({P0: 2}, True)]  # sent asynchronously; suppose it failed at the broker
    worker.finish()
    assert consumer.commits[-1] == ({P0: 2}, False)


def test_identify_events_record_the_precision_the_compute_ran_in() -> None:
    class InBf16:
        precision = "bf16"

        def __call__(self, faces, watch):
            return _name_all(faces, watch)

    producer, consumer, sink = FakeProducer(), FakeConsumer(), RecordingSink()
    worker = IdentifyWorker(consumer, producer, InBf16(), sink, stats=IdentifyStats(), commit_interval_s=0.0)
    worker.handle(_batch([_record(0, 0, 0)]))
    worker.settle()
    identify = [event for event in sink.events if event.stage == "identify"]
    assert [event.precision for event in identify] == ["bf16"]
    assert {event.precision for event in sink.events if event.stage == "broker_wait"} == {None}


def test_an_identity_is_timed_at_its_acknowledgement_not_when_it_was_made() -> None:
    producer, consumer, sink = FakeProducer(), FakeConsumer(), RecordingSink()
    worker = IdentifyWorker(consumer, producer, _name_all, sink, stats=IdentifyStats(), commit_interval_s=0.0)
    worker.handle(_batch([_record(0, 0, 0)]))
    producer.appended_ms = time.time_ns() // 1_000_000 + 250  # the brokers took it a quarter second later
    worker.settle()
    [identify] = [event for event in sink.events if event.stage == "identify"]
    assert identify.delivered_ns == producer.appended_ms * 1_000_000
    assert identify.delivered_ns - identify.wall_end_ns >= 249_000_000


def test_the_broker_wait_is_split_by_owner_and_the_parts_tile_it() -> None:
    producer, consumer, sink = FakeProducer(), FakeConsumer(), RecordingSink()
    worker = IdentifyWorker(consumer, producer, _name_all, sink, stats=IdentifyStats(), commit_interval_s=0.0)
    detected_ns = time.time_ns() - 100_000_000
    appended_ms = detected_ns // 1_000_000 + 10
    meta = FaceMeta("run", "cam-1", 0, 0, 1, (0, 0, 160, 160), 1.0, "synthetic", *[detected_ns] * 6)
    _, value, headers = encode_face(FaceMessage(meta, b"thumbnail"))
    record = Record("faces", 0, 0, None, value, headers, timestamp_ms=appended_ms, timestamp_is_broker_append=True)
    requested_ns = appended_ms * 1_000_000 + 30_000_000  # the consumer was busy for 30 ms after the append
    fetched_ns = requested_ns + 5_000_000
    worker.handle(Batch([record], requested_ns, [fetched_ns]))
    worker.settle()
    [wait] = [event for event in sink.events if event.stage == "broker_wait"]
    parts = wait.substeps_ms
    assert parts["produce"] == pytest.approx((appended_ms * 1_000_000 - detected_ns) / 1e6, abs=0.001)
    assert parts["consumer_busy"] == pytest.approx(30.0)
    assert parts["in_kafka"] == pytest.approx(5.0)
    assert sum(parts.values()) == pytest.approx((wait.wall_end_ns - wait.wall_start_ns) / 1e6, abs=0.01)
    assert parts["client_queue"] >= 0


def test_a_run_of_its_own_skips_and_commits_faces_other_runs_left() -> None:
    producer, consumer = FakeProducer(), FakeConsumer()
    worker = _worker(producer, consumer, run_id="this-run")
    worker.handle(_batch([_record(0, 0, 0, run_id="interrupted-run"), _record(0, 1, 1, run_id="this-run")]))
    worker.finish()
    assert worker.stats.other_runs == 1 and worker.stats.faces == 1 and producer.sent == 1
    assert consumer.commits[-1] == ({P0: 2}, False)  # the leftover is committed past, never identified
