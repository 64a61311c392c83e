"""kafka-python's consumer joins its group only once its own metadata holds the topics' partitions, and after a
revocation it reads each revoked partition again from its committed offset; its CRCs are the C library's."""

from __future__ import annotations

import pytest

from aitax.common.errors import UserError
from aitax.pipeline.transport import kafka_python


class _FakeKafkaConsumer:
    """Partitions appear after `known_after` metadata lookups, as on a broker that learns a new topic late."""

    known_after = 3

    def __init__(self, **settings: object) -> None:
        self.lookups = 0
        self.calls: list[str] = []
        self._net = type("Net", (), {"sleep": staticmethod(lambda _s: None)})()

    def partitions_for_topic(self, topic: str) -> set[int]:
        self.lookups += 1
        self.calls.append("lookup")
        return {0} if self.lookups > self.known_after else set()

    def subscribe(self, topics: list[str], listener: object) -> None:
        self.calls.append("subscribe")

    def close(self) -> None:
        self.calls.append("close")


@pytest.fixture
def fake_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_python, "KafkaConsumer", _FakeKafkaConsumer)
    monkeypatch.setattr(kafka_python.time, "sleep", lambda _s: None)


def test_subscribes_only_after_the_partitions_are_known(fake_client: None) -> None:
    consumer = kafka_python.KafkaPythonConsumer("localhost:1", "group", ["faces"])
    assert consumer._consumer.calls == ["lookup"] * 4 + ["subscribe"]


def test_a_topic_that_never_appears_is_a_one_line_error(fake_client: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_FakeKafkaConsumer, "known_after", 10**9)
    monkeypatch.setattr(kafka_python, "TOPIC_METADATA_TIMEOUT_S", 0.0)
    with pytest.raises(UserError, match="topic 'faces': not in the cluster metadata"):
        kafka_python.KafkaPythonConsumer("localhost:1", "group", ["faces"])


def test_a_revoked_partition_goes_back_to_its_committed_offset() -> None:
    """kafka-python keeps a retained partition's position across a rebalance; the stage dropped its uncommitted
    records, so the consumer must read them again, from the committed offset (or the beginning, with none)."""
    import asyncio

    from kafka.structs import TopicPartition

    calls: list[tuple] = []

    class Client:
        def committed(self, partition: TopicPartition) -> int | None:
            return {0: 7}.get(partition.partition)

        def seek(self, partition: TopicPartition, offset: int) -> None:
            calls.append(("seek", partition.partition, offset))

        def seek_to_beginning(self, partition: TopicPartition) -> None:
            calls.append(("beginning", partition.partition))

    async def no_wait(_seconds: float) -> None:
        await asyncio.sleep(0)

    revocations = kafka_python._Revocations()
    revocations.handler = lambda partitions: calls.append(("handler", sorted(p for _, p in partitions)))
    revocations.sleep, revocations.consumer = no_wait, Client()
    asyncio.run(revocations.on_partitions_revoked([TopicPartition("faces", 0), TopicPartition("faces", 1)]))
    assert calls == [("handler", [0, 1]), ("seek", 0, 7), ("beginning", 1)]  # after the handler's commit


def test_record_crcs_are_computed_in_c_and_fetches_wait_less_than_the_base() -> None:
    """In Python, kafka-python's CRC32C took 6.5 ms of CPU per 37 kB face, in the producer and again in the consumer;
    the `crc32c` dependency replaces it, which kafka-python picks at import."""
    import os

    from kafka.record import util

    from aitax.pipeline.transport.base import FETCH_MAX_WAIT_MS

    assert util._crc32c is not util.crc32c_py  # the C one
    face = os.urandom(37_000)
    assert util.calc_crc32c(face) == util.crc32c_py(face)  # the same sums
    assert kafka_python.KAFKA_PYTHON_FETCH_MAX_WAIT_MS < FETCH_MAX_WAIT_MS
