"""The transport over kafka-python (pure Python).

kafka-python has no send back-pressure (an unthrottled loop queued 280 MB in 2 s), so in-flight sends are
capped here; its callbacks run on its I/O thread, so reports are queued and run in the caller's `poll`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from kafka import AsyncConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.errors import CommitFailedError
from kafka.structs import OffsetAndMetadata, TopicPartition

from aitax.common.errors import UserError
from aitax.pipeline.transport.base import (
    ASSIGNORS,
    CONNECT_TIMEOUT_S,
    FETCH_MIN_BYTES,
    HEARTBEAT_INTERVAL_MS,
    PRODUCER_MAX_IN_FLIGHT,
    SESSION_TIMEOUT_MS,
    CommitRejectedError,
    DeliveryCallback,
    DeliveryReport,
    Partition,
    Record,
    RevokeHandler,
)
from aitax.pipeline.transport.security import kafka_python_settings

ASSIGNOR_CLASSES = {"roundrobin": RoundRobinPartitionAssignor, "range": RangePartitionAssignor}
LOG_APPEND_TIME = 1  # kafka-python's timestamp_type for broker append time
MAX_IN_FLIGHT_SENDS = 400
REVOKE_YIELD_S = 0.005
# kafka-python leaves a partition whose fetched records are not yet drained out of the next fetch to its broker, and
# sends one fetch per broker at a time: that fetch, for the broker's other partitions, waits out fetch_max_wait while
# the left-out partition's new records wait behind it. At the base's 500 ms, faces waited 158 ms mean in Kafka at the
# demo's load (confluent-kafka: 7); at 50, 8 ms, for at most 20 idle fetches a second per broker.
KAFKA_PYTHON_FETCH_MAX_WAIT_MS = 50
TOPIC_METADATA_TIMEOUT_S = 30.0


class KafkaPythonProducer:
    client_name = "kafka-python"

    def __init__(self, bootstrap_servers: str, linger_ms: float = 5.0, idempotent: bool = False,
                 **settings: object) -> None:
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers.split(","),
            acks="all",
            enable_idempotence=idempotent,
            max_in_flight_requests_per_connection=PRODUCER_MAX_IN_FLIGHT,
            linger_ms=linger_ms,
            batch_size=1024 * 1024,
            max_request_size=2 * 1024 * 1024,
            delivery_timeout_ms=300_000,
            **kafka_python_settings(),
            **settings,
        )
        self._in_flight = 0
        self._in_flight_changed = threading.Condition()
        self._reports: queue.SimpleQueue[tuple[DeliveryCallback, DeliveryReport]] = queue.SimpleQueue()

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
        with self._in_flight_changed:
            while self._in_flight >= MAX_IN_FLIGHT_SENDS:
                self._in_flight_changed.wait(0.05)
                self.poll()
            self._in_flight += 1
        future = self._producer.send(topic, value=value, key=key, headers=list((headers or {}).items()),
                                     partition=partition)

        def done(result) -> None:
            with self._in_flight_changed:
                self._in_flight -= 1
                self._in_flight_changed.notify()
            if on_delivery is not None:
                if isinstance(result, Exception):
                    report = DeliveryReport(topic, -1, -1, repr(result), opaque)
                else:
                    report = DeliveryReport(result.topic, result.partition, result.offset, None, opaque,
                                            result.timestamp)
                self._reports.put((on_delivery, report))

        future.add_callback(done)
        future.add_errback(done)

    def poll(self, timeout_s: float = 0.0) -> None:
        try:
            callback, report = self._reports.get(timeout=timeout_s) if timeout_s > 0 else self._reports.get_nowait()
        except queue.Empty:
            return
        callback(report)
        while True:
            try:
                callback, report = self._reports.get_nowait()
            except queue.Empty:
                return
            callback(report)

    def connect(self, topics: Sequence[str], timeout_s: float = CONNECT_TIMEOUT_S) -> dict[str, int]:
        # The metadata only: kafka-python opens a leader's connection with its first record, and offers no public way
        # to open it before.
        deadline = time.monotonic() + timeout_s
        partitions = {}
        for topic in topics:
            while not partitions.get(topic) and time.monotonic() < deadline:
                partitions[topic] = len(self._producer.partitions_for(topic) or ())
                time.sleep(0 if partitions[topic] else 0.1)
        return partitions

    def flush(self, timeout_s: float = 30.0) -> int:
        self._producer.flush(timeout=timeout_s)
        self.poll()
        with self._in_flight_changed:
            return self._in_flight

    def close(self) -> None:
        self.flush()
        self._producer.close()


class _Revocations(AsyncConsumerRebalanceListener):
    """kafka-python calls rebalance listeners on its I/O thread, where a blocking commit raises (it would wait on
    its own loop). So the handler runs on a helper thread, free to commit synchronously, while the listener yields
    to the loop that carries those commits.

    After the handler, each revoked partition goes back to its committed offset. kafka-python keeps the position of
    a partition the new assignment gives back to the same consumer, but the stage dropped that partition's
    uncommitted records, trusting its next owner to read them from the committed offset, as librdkafka's eager
    assignment does. Seen: a face fetched before a rebalance was never identified by the consumer that kept its
    partition."""

    def __init__(self) -> None:
        self.handler: RevokeHandler | None = None
        self.sleep: Callable[[float], Awaitable[None]] | None = None  # the consumer's own loop's sleep
        self.consumer: KafkaConsumer | None = None

    async def on_partitions_revoked(self, revoked) -> None:
        if self.handler is None or not revoked:
            return
        partitions = [(p.topic, p.partition) for p in revoked]
        failure: list[BaseException] = []

        def run_handler() -> None:
            try:
                self.handler(partitions)
                self._back_to_committed(revoked)
            except BaseException as error:  # re-raised on the loop, where kafka-python reports listener errors
                failure.append(error)

        helper = threading.Thread(target=run_handler, name="aitax-revoke", daemon=True)
        helper.start()
        while helper.is_alive():
            await self.sleep(REVOKE_YIELD_S)
        if failure:
            raise failure[0]

    def _back_to_committed(self, revoked) -> None:
        for partition in revoked:
            committed = self.consumer.committed(partition)
            if committed is None:  # as a new owner would: auto_offset_reset earliest
                self.consumer.seek_to_beginning(partition)
            else:
                self.consumer.seek(partition, committed)

    async def on_partitions_assigned(self, assigned) -> None:
        pass


class KafkaPythonConsumer:
    client_name = "kafka-python"

    def __init__(self, bootstrap_servers: str, group_id: str, topics: Sequence[str], **settings: object) -> None:
        self.commit_failures = 0
        self._revocations = _Revocations()
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap_servers.split(","),
            group_id=group_id,
            partition_assignment_strategy=[ASSIGNOR_CLASSES[name] for name in ASSIGNORS],
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_min_bytes=FETCH_MIN_BYTES,
            fetch_max_wait_ms=KAFKA_PYTHON_FETCH_MAX_WAIT_MS,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            **kafka_python_settings(),
            **settings,
        )
        self._revocations.sleep = self._consumer._net.sleep  # kafka-python has no public handle on its loop
        self._revocations.consumer = self._consumer
        self._await_partitions(topics)
        self._consumer.subscribe(list(topics), listener=self._revocations)

    def _await_partitions(self, topics: Sequence[str]) -> None:
        """Join only once this client's metadata has every topic's partitions. A KRaft broker learns a new topic
        a moment after CreateTopics returns; a kafka-python group leader that asks it then assigns nothing
        ("No partition metadata") and was seen not to rejoin within 30 s."""
        deadline = time.monotonic() + TOPIC_METADATA_TIMEOUT_S
        for topic in topics:
            while not self._consumer.partitions_for_topic(topic):
                if time.monotonic() >= deadline:
                    self._consumer.close()
                    raise UserError(f"topic {topic!r}: not in the cluster metadata after "
                                    f"{TOPIC_METADATA_TIMEOUT_S:.0f} s; create it first (`aitax stack up` makes "
                                    "the pipeline's topics)")
                time.sleep(0.2)

    def on_revoke(self, handler: RevokeHandler) -> None:
        self._revocations.handler = handler

    def poll_batch(self, max_records: int, timeout_s: float) -> list[Record]:
        batches = self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        return [
            Record(
                topic=r.topic,
                partition=r.partition,
                offset=r.offset,
                key=r.key,
                value=r.value,
                headers=dict(r.headers or []),
                timestamp_ms=r.timestamp,
                timestamp_is_broker_append=r.timestamp_type == LOG_APPEND_TIME,
            )
            for records in batches.values()
            for r in records
        ]

    def commit(self, positions: Mapping[Partition, int], asynchronous: bool = False) -> None:
        """kafka-python retries coordinator moves itself; a rebalance surfaces as CommitFailedError."""
        if not positions:
            return
        offsets = {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in positions.items()}
        if asynchronous:
            self._consumer.commit_async(offsets, callback=self._committed)
            return
        try:
            self._consumer.commit(offsets)
        except CommitFailedError as error:
            raise CommitRejectedError(str(error)) from None

    def _committed(self, _offsets, response) -> None:
        if isinstance(response, Exception):
            self.commit_failures += 1

    def assigned(self) -> bool:
        return bool(self._consumer.assignment())

    def lag(self, record: Record) -> int | None:
        high = self._consumer.highwater(TopicPartition(record.topic, record.partition))
        return None if high is None else max(0, high - record.offset - 1)

    def close(self) -> None:
        self._consumer.close()
