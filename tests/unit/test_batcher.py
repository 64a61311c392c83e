"""The dynamic batcher on a consumer whose records arrive on a virtual clock: what it batches, and when.

The fake consumer answers a poll as both Kafka clients do once asked for at most what is missing: at once with what
has arrived, else as soon as something arrives within the timeout, else empty at the timeout."""

from __future__ import annotations

import pytest

from aitax.pipeline.transport import Record
from aitax.pipeline.transport.batcher import IDLE_WAIT_S, BatchPolicy, DynamicBatcher

MS = 1_000_000


class Arrivals:
    """Records that arrive at virtual times (ns); polling moves the clock as a blocking poll would."""

    client_name = "fake"

    def __init__(self, arrivals_ms: list[float], partition_of=lambda offset: 0) -> None:
        self.now_ns = 0
        self.pending = [(round(t * MS), Record("faces", partition_of(i), i, None, b"x"))
                        for i, t in enumerate(arrivals_ms)]
        self.revoke = None
        self.revoke_at_poll: tuple[int, list] | None = None  # (poll number, partitions) to revoke during it
        self.polls = 0

    def clock(self) -> int:
        return self.now_ns

    def on_revoke(self, handler) -> None:
        self.revoke = handler

    def poll_batch(self, max_records: int, timeout_s: float) -> list[Record]:
        self.polls += 1
        if self.revoke_at_poll and self.revoke_at_poll[0] == self.polls:
            gone = self.revoke_at_poll[1]
            self.pending = [(t, r) for t, r in self.pending if (r.topic, r.partition) not in gone]
            self.revoke(gone)
        if not any(t <= self.now_ns for t, _ in self.pending):
            first = min((t for t, _ in self.pending), default=None)
            if first is None or first > self.now_ns + round(timeout_s * 1e9):
                self.now_ns += round(timeout_s * 1e9)
                return []
            self.now_ns = first
        ready = [record for t, record in self.pending if t <= self.now_ns][:max_records]
        self.pending = [(t, r) for t, r in self.pending if r not in ready]
        return ready


def _batcher(consumer: Arrivals, max_batch: int = 8, delay_ms: float = 0.0, **kwargs) -> DynamicBatcher:
    return DynamicBatcher(consumer, BatchPolicy(max_batch, delay_ms), clock_ns=consumer.clock, **kwargs)


def test_a_lone_face_is_batched_alone_and_at_once() -> None:
    consumer = Arrivals([5.0, 5.0 + IDLE_WAIT_S * 1000 + 100])
    batcher = _batcher(consumer)
    batch = batcher.next_batch()
    assert [r.offset for r in batch.records] == [0]
    assert batch.fetched_ns == [5 * MS] and consumer.now_ns == 5 * MS  # handed over the moment it arrived
    assert batch.requested_ns == 0
    batch = batcher.next_batch()
    assert [r.offset for r in batch.records] == [] and consumer.now_ns == 5 * MS + IDLE_WAIT_S * 1e9  # idle
    assert [r.offset for r in batcher.next_batch().records] == [1]


def test_a_burst_forms_one_full_batch_and_the_rest_follows() -> None:
    consumer = Arrivals([10.0] * 11)
    batcher = _batcher(consumer)
    first = batcher.next_batch()
    assert [r.offset for r in first.records] == list(range(8)) and consumer.now_ns == 10 * MS
    assert [r.offset for r in batcher.next_batch().records] == [8, 9, 10]


def test_no_delay_never_waits_for_a_face_about_to_arrive() -> None:
    consumer = Arrivals([0.0, 1.0])
    batch = _batcher(consumer).next_batch()
    assert [r.offset for r in batch.records] == [0] and consumer.now_ns == 0


@pytest.mark.parametrize(("delay_ms", "first_batch"),
                         [(0.0, [0]), (2.0, [0, 1]), (10.0, [0, 1, 2]), (20.0, [0, 1, 2, 3])])
def test_the_maximum_queue_delay_is_honoured(delay_ms: float, first_batch: list[int]) -> None:
    arrivals_ms = [0.0, 2.0, 9.0, 15.0, 40.0]
    consumer = Arrivals(arrivals_ms)
    batcher = _batcher(consumer, delay_ms=delay_ms)
    batch = batcher.next_batch()
    assert [r.offset for r in batch.records] == first_batch
    assert consumer.now_ns <= delay_ms * MS  # it waited no longer than allowed after the first arrival
    assert batch.fetched_ns == [round(arrivals_ms[r.offset] * MS) for r in batch.records]  # each as handed over


def test_the_delay_stops_early_once_the_batch_is_full() -> None:
    consumer = Arrivals([0.0, 1.0, 2.0, 50.0])
    batch = _batcher(consumer, max_batch=3, delay_ms=100.0).next_batch()
    assert [r.offset for r in batch.records] == [0, 1, 2] and consumer.now_ns == 2 * MS


def test_a_partition_revoked_while_its_batch_forms_is_dropped_and_the_stage_told() -> None:
    consumer = Arrivals([0.0, 0.0, 1.0, 1.0], partition_of=lambda offset: offset % 2)
    told = []
    batcher = _batcher(consumer, delay_ms=5.0, on_revoke=told.append)
    consumer.revoke_at_poll = (3, [("faces", 1)])  # during the wait for more: partition 1 goes elsewhere
    batch = batcher.next_batch()
    assert {r.partition for r in batch.records} == {0} and told == [[("faces", 1)]]
    assert len(batch.fetched_ns) == len(batch.records)


@pytest.mark.parametrize(("max_batch", "delay_ms"), [(0, 0.0), (8, -1.0), (8, 120_000.0)])
def test_a_policy_out_of_range_is_refused(max_batch: int, delay_ms: float) -> None:
    with pytest.raises(ValueError, match="max"):
        BatchPolicy(max_batch, delay_ms)


def test_a_batch_of_one_never_asks_the_client_for_none() -> None:
    class Strict(Arrivals):
        def poll_batch(self, max_records: int, timeout_s: float) -> list[Record]:
            assert max_records > 0, "kafka-python refuses max_records=0"
            return super().poll_batch(max_records, timeout_s)

    consumer = Strict([0.0, 0.0, 0.0])
    batcher = _batcher(consumer, max_batch=1, delay_ms=5.0)
    assert [[r.offset for r in batcher.next_batch().records] for _ in range(3)] == [[0], [1], [2]]
