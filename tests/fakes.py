"""Kafka clients faked at the transport's interface, for unit tests of a stage's logic (the integration suite runs
the same code on real brokers)."""

from __future__ import annotations

from aitax.pipeline.transport import DeliveryReport, Record


class FakeProducer:
    """Holds sends until `poll`, then reports them in the order (and with the errors) the test chooses."""

    client_name = "fake"

    def __init__(self) -> None:
        self.pending: list[tuple[str, bytes, object, object]] = []
        self.errors: dict[int, str] = {}  # send index -> error
        self.sent = 0
        self.partitions: list[int | None] = []  # each send's, None where the key decides
        self.reverse = False
        self.appended_ms = 0  # the brokers' append time the delivery reports carry

    def send(self, topic, value, key=None, headers=None, on_delivery=None, opaque=None, partition=None) -> None:
        self.pending.append((topic, value, on_delivery, (self.sent, opaque)))
        self.partitions.append(partition)
        self.sent += 1

    def poll(self, timeout_s: float = 0.0) -> None:
        pending, self.pending = self.pending, []
        for topic, _value, on_delivery, (index, opaque) in (reversed(pending) if self.reverse else pending):
            on_delivery(DeliveryReport(topic, 0, index, self.errors.get(index), opaque, self.appended_ms))

    def connect(self, topics, timeout_s: float = 30.0) -> dict[str, int]:
        return dict.fromkeys(topics, 12)

    def flush(self, timeout_s: float = 30.0) -> int:
        self.poll()
        return 0

    def close(self) -> None:
        pass


class FakeConsumer:
    client_name = "fake"

    def __init__(self) -> None:
        self.commits: list[tuple[dict, bool]] = []
        self.revoke = None

    def commit(self, positions, asynchronous: bool = False) -> None:
        self.commits.append((dict(positions), asynchronous))

    def on_revoke(self, handler) -> None:
        self.revoke = handler

    def lag(self, record: Record) -> int | None:
        return 0

    def poll_batch(self, max_records: int, timeout_s: float) -> list[Record]:
        return []

    def close(self) -> None:
        pass
