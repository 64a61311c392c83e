"""The transport interfaces and the factory that picks a Kafka client."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

KAFKA_CLIENTS = ("confluent-kafka", "kafka-python")
# Consumer fetches set for latency: the brokers answer a fetch as soon as one byte is there (a larger minimum would
# hold a lone face back), and an idle fetch waits at most this long before it is asked again (it ends the moment a
# record arrives, so this costs no latency; shorter only adds idle requests). kafka-python's own is shorter
# (pipeline.transport.kafka_python: a fetch there can leave out the partition whose records arrive).
FETCH_MIN_BYTES = 1
FETCH_MAX_WAIT_MS = 500
# A consumer that dies holds its partitions until its session times out: their faces wait that long. 10 s on both
# clients (kafka-python's default; librdkafka's is 45 s): both heartbeat from a thread of their own, so a long batch
# of inference does not miss one, and max.poll.interval still catches a stage that stopped polling.
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 3_000
# Producers: acks=all (every in-sync replica, min.insync 2) with retries through fail-over. Only the producers of
# results (identities, detections) are idempotent, so a retried result is never published twice. Faces and frames
# are not: librdkafka 2.16's idempotence cost 250-300 us of client CPU per 37 kB face against 40 us without it
# (docs/emulation.md, the emulator against Kafka's tools), and a retried face written twice is dropped by identify
# (by key). Nothing is lost either way.
# Partitions dealt to a group's members in turn, so that records spread over consecutive partitions (a stream's
# tracks, `pipeline.tracking.TrackLanes`) reach different members; range, the clients' default, is kept as the
# fall-back that a group still holding members of an older release agrees on.
ASSIGNORS = ("roundrobin", "range")
CONNECT_TIMEOUT_S = 30.0  # a producer's metadata and first connections, before its stage is ready
PRODUCER_MAX_IN_FLIGHT = 5  # requests per broker connection (Java's default; idempotence allows at most 5)


class CommitRejectedError(RuntimeError):
    """The group rebalanced before a commit: those records go to their new owner, which reprocesses them."""


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)
    timestamp_ms: int = 0
    timestamp_is_broker_append: bool = False  # the topic uses LogAppendTime: the broker's clock at append

    @property
    def appended_ns(self) -> int | None:
        """When the brokers appended the record, where its topic says (LogAppendTime)."""
        return self.timestamp_ms * 1_000_000 if self.timestamp_is_broker_append else None


@dataclass(frozen=True)
class DeliveryReport:
    topic: str
    partition: int
    offset: int
    error: str | None
    opaque: object = None  # what the caller passed to `send`, handed back unchanged
    # The record's timestamp as the brokers reported it: their append time where the topic uses LogAppendTime
    timestamp_ms: int = 0


DeliveryCallback = Callable[[DeliveryReport], None]
Partition = tuple[str, int]  # (topic, partition)
# Called inside `poll_batch` just before the group takes partitions away: the last moment to commit them.
RevokeHandler = Callable[[list[Partition]], None]


class Producer(Protocol):
    client_name: str

    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        headers: dict[str, bytes] | None = None,
        on_delivery: DeliveryCallback | None = None,
        opaque: object = None,
        partition: int | None = None,
    ) -> None:
        """Queue one record, to `partition` or (None) where its key hashes to; blocks (serving callbacks) while the
        client's send buffer is full."""

    def poll(self, timeout_s: float = 0.0) -> None:
        """Run delivery callbacks that are due, in the caller's thread."""

    def connect(self, topics: Sequence[str], timeout_s: float = CONNECT_TIMEOUT_S) -> dict[str, int]:
        """Learn `topics`' partitions and leaders, and open connections (TCP and TLS) now: a stage is ready only
        once its first record costs what the others do, not a metadata round trip and handshakes more. Returns
        each topic's partition count."""

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for every queued record's acknowledgement; returns how many are still unacknowledged."""

    def close(self) -> None: ...


class Consumer(Protocol):
    client_name: str

    def poll_batch(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to `max_records` records (possibly none) within `timeout_s`."""

    def commit(self, positions: Mapping[Partition, int], asynchronous: bool = False) -> None:
        """Commit these positions (the next offset to read, per partition): only past records whose results are
        durable. Synchronous by default; `asynchronous` sends it without waiting (a failure is counted in
        `commit_failures` and the next commit covers it)."""

    def on_revoke(self, handler: RevokeHandler) -> None:
        """Call `handler` before partitions are revoked or lost in a rebalance."""

    def assigned(self) -> bool:
        """Whether the group has given this consumer partitions (it joins while `poll_batch` is called)."""

    def lag(self, record: Record) -> int | None:
        """Records after this one in its partition, from the client's cached high watermark (no round trip)."""

    def close(self) -> None: ...


def next_offsets(records: Sequence[Record]) -> dict[Partition, int]:
    """The position to commit per partition once all these records are processed: one past the highest."""
    offsets: dict[Partition, int] = {}
    for record in records:
        key = (record.topic, record.partition)
        offsets[key] = max(offsets.get(key, -1), record.offset + 1)
    return offsets

