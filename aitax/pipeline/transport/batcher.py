"""The one dynamic batcher every consuming stage takes its work from: identify, three-stage detect, Object Detection
and the emulator's identify, on either Kafka client.

It is shaped after Triton's dynamic batcher: a batch is whatever is available now, up to `max_batch`, and it never
waits for a batch to fill unless told to. `max_queue_delay_ms` is that opt-in trade: after the first record arrives,
wait up to this long for more (latency for fuller batches). The default is 0.

Both clients give the same batches from the same arrivals: every wait is a poll for one record, which returns the
moment one is there, and what the client already holds is taken without waiting. (librdkafka's `consume(n, timeout)`
waits for all n records or the whole timeout, kafka-python's `poll` returns with what it has: asked for several
records with a timeout, the two would batch differently.)

Each batch carries the moments that split a face's wait between its stages by owner (`telemetry.latency`): when the
stage asked for work and when the client handed each record over (the stage times the batch's start itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from aitax.pipeline.transport.base import Consumer, Partition, Record, RevokeHandler

# How long one call waits for a first record before returning an empty batch, so the stage can check whether to stop
# and settle its acknowledgements. Not a latency: the call returns the moment a record is there.
IDLE_WAIT_S = 0.5


@dataclass(frozen=True)
class BatchPolicy:
    """How a consuming stage forms its batches."""

    max_batch: int = 8
    max_queue_delay_ms: float = 0.0  # after the first record, wait this long for a fuller batch (0: never wait)

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max batch {self.max_batch}: at least 1")
        if not 0 <= self.max_queue_delay_ms <= 60_000:
            raise ValueError(f"max queue delay {self.max_queue_delay_ms:g} ms: 0 to 60000")


DEFAULT_BATCHING = BatchPolicy()


@dataclass(frozen=True)
class Batch:
    records: list[Record]
    requested_ns: int  # the stage asked for work: from here on it was free to take a record
    fetched_ns: list[int]  # per record: the client handed it over

    def __len__(self) -> int:
        return len(self.records)


class DynamicBatcher:
    """Batches from one consumer. It holds the consumer's revocation hook: a record of a partition revoked while its
    batch was still forming is dropped (the partition's new owner reads it), then the stage's handler runs."""

    def __init__(self, consumer: Consumer, policy: BatchPolicy = DEFAULT_BATCHING,
                 on_revoke: RevokeHandler | None = None, idle_wait_s: float = IDLE_WAIT_S,
                 clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.consumer, self.policy, self.idle_wait_s, self.clock_ns = consumer, policy, idle_wait_s, clock_ns
        self._on_revoke = on_revoke
        self._forming: list[tuple[Record, int]] = []
        consumer.on_revoke(self._revoked)

    def _revoked(self, partitions: list[Partition]) -> None:
        gone = set(partitions)
        self._forming = [(r, t) for r, t in self._forming if (r.topic, r.partition) not in gone]
        if self._on_revoke is not None:
            self._on_revoke(partitions)

    def _take(self, max_records: int, timeout_s: float) -> int:
        records = self.consumer.poll_batch(max_records, timeout_s)
        fetched_ns = self.clock_ns()
        self._forming += [(record, fetched_ns) for record in records]
        return len(records)

    def next_batch(self) -> Batch:
        """What is available now, up to the maximum batch: waits for a first record (at most `idle_wait_s`), then
        takes what the client already holds, and waits longer only within the maximum queue delay."""
        requested_ns = self.clock_ns()
        self._forming = []
        self._take(1, self.idle_wait_s)
        if self._forming:
            deadline_ns = self.clock_ns() + round(self.policy.max_queue_delay_ms * 1e6)
            while len(self._forming) < self.policy.max_batch:
                self._take(self.policy.max_batch - len(self._forming), 0.0)  # what the client already holds
                wait_s = (deadline_ns - self.clock_ns()) / 1e9
                if len(self._forming) >= self.policy.max_batch or wait_s <= 0:
                    break
                # One record at a time while waiting: a poll for several would hold the first until all came
                # (librdkafka's), and each record's hand-over would be timed late.
                self._take(1, wait_s)
        forming, self._forming = self._forming, []
        return Batch([record for record, _ in forming], requested_ns, [fetched for _, fetched in forming])
