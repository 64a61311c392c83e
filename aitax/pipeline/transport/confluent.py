"""The transport over confluent-kafka (librdkafka)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Consumer as _Consumer
from confluent_kafka import Producer as _Producer

from aitax.pipeline.transport.base import (
    ASSIGNORS,
    CONNECT_TIMEOUT_S,
    FETCH_MAX_WAIT_MS,
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
from aitax.pipeline.transport.security import librdkafka_settings

log = logging.getLogger(__name__)

# The producer's queue of unacknowledged records, as Java's `buffer.memory` default (librdkafka's is 1 GB: a
# producer faster than the brokers would queue half a minute of faces and deliver them long after the run).
PRODUCER_QUEUE_KB = 32 * 1024
# A consumer's prefetched records (librdkafka's default is 64 MB each: 64 emulated identify instances could hold
# 4 GB of thumbnails); 16 MB is still over 400 faces, more than any batch takes.
CONSUMER_QUEUE_KB = 16 * 1024
COMMIT_RETRY_S = 120.0  # a coordinator moves within seconds; give a starved machine much longer
COORDINATOR_MOVING = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                      KafkaError.NOT_COORDINATOR, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
                      KafkaError._TRANSPORT, KafkaError.NETWORK_EXCEPTION, KafkaError._WAIT_COORD}
MISSING_TOPIC_WARNING_S = 30.0
# A chart's topics Job grants the ACLs as it creates the topics, after the pods start: a consumer refused in its
# first minutes waits for them (a crash there restarts the pod while it is being used). Refused later: fatal.
NOT_YET_AUTHORIZED = {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED}
ACL_GRACE_S = 180.0
# A subscribed topic created after the consumer started is seen at the next metadata refresh (default 5 min).
TOPIC_METADATA_REFRESH_MS = 10_000
REBALANCED = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
              KafkaError._ASSIGNMENT_LOST}


class ConfluentProducer:
    client_name = "confluent-kafka"

    def __init__(self, bootstrap_servers: str, linger_ms: float = 5.0, idempotent: bool = False,
                 **settings: object) -> None:
        self._producer = _Producer(
            librdkafka_settings(bootstrap_servers, {
                "acks": "all",
                "enable.idempotence": idempotent,
                "max.in.flight.requests.per.connection": PRODUCER_MAX_IN_FLIGHT,
                "linger.ms": linger_ms,
                "message.max.bytes": 2 * 1024 * 1024,
                # Retry through broker fail-over for up to five minutes rather than drop a face.
                "delivery.timeout.ms": 300_000,
                "queue.buffering.max.kbytes": PRODUCER_QUEUE_KB,
                # Every broker connected as soon as metadata names it (see `connect`), not at its first record.
                "enable.sparse.connections": False,
                **settings,
            })
        )

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
        where = {} if partition is None else {"partition": partition}

        def report(error: KafkaError | None, message) -> None:
            if on_delivery is not None:
                on_delivery(
                    DeliveryReport(
                        message.topic(),
                        message.partition(),
                        message.offset(),
                        None if error is None else str(error),
                        opaque,
                        message.timestamp()[1],
                    )
                )

        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=headers, on_delivery=report, **where)
                return
            except BufferError:
                self._producer.poll(0.05)  # back-pressure: wait for acknowledgements to free the queue

    def poll(self, timeout_s: float = 0.0) -> None:
        self._producer.poll(timeout_s)

    def connect(self, topics: Sequence[str], timeout_s: float = CONNECT_TIMEOUT_S) -> dict[str, int]:
        # the leaders' connections open as the metadata arrives (no sparse connections)
        return {topic: len(self._producer.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
                for topic in topics}

    def flush(self, timeout_s: float = 30.0) -> int:
        return self._producer.flush(timeout_s)

    def close(self) -> None:
        self._producer.flush(30)


class ConfluentConsumer:
    client_name = "confluent-kafka"

    def __init__(self, bootstrap_servers: str, group_id: str, topics: Sequence[str], **settings: object) -> None:
        self.commit_failures = 0
        self._revoke_handler: RevokeHandler | None = None
        self._next_missing_topic_warning = 0.0
        self._created = time.monotonic()
        self._consumer = _Consumer(
            librdkafka_settings(bootstrap_servers, {
                "group.id": group_id,
                "partition.assignment.strategy": ",".join(ASSIGNORS),
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": TOPIC_METADATA_REFRESH_MS,
                "fetch.min.bytes": FETCH_MIN_BYTES,
                "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                "queued.max.messages.kbytes": CONSUMER_QUEUE_KB,
                "on_commit": self._committed,
                **settings,
            })
        )
        self._consumer.subscribe(list(topics), on_revoke=self._revoked, on_lost=self._revoked)

    def on_revoke(self, handler: RevokeHandler) -> None:
        self._revoke_handler = handler

    def _revoked(self, _consumer: _Consumer, partitions: list[TopicPartition]) -> None:
        if self._revoke_handler is not None and partitions:
            self._revoke_handler([(p.topic, p.partition) for p in partitions])

    def _not_yet(self, what: str, error: KafkaError) -> None:
        if time.monotonic() >= self._next_missing_topic_warning:
            log.warning("waiting for %s: %s", what, error.str())
            self._next_missing_topic_warning = time.monotonic() + MISSING_TOPIC_WARNING_S

    def _committed(self, error: KafkaError | None, _partitions: list[TopicPartition]) -> None:
        if error is not None and error.code() != KafkaError._NO_OFFSET:
            self.commit_failures += 1

    def poll_batch(self, max_records: int, timeout_s: float) -> list[Record]:
        records = []
        for message in self._consumer.consume(num_messages=max_records, timeout=timeout_s):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    # Not yet created (a chart's topics Job runs after the pods start): wait, do not crash-loop.
                    self._not_yet("the subscribed topics to exist", error)
                    continue
                if error.code() in NOT_YET_AUTHORIZED and time.monotonic() - self._created < ACL_GRACE_S:
                    self._not_yet(f"this client's ACLs (at most {ACL_GRACE_S:.0f} s from its start)", error)
                    continue
                raise KafkaException(error)
            timestamp_type, timestamp_ms = message.timestamp()
            records.append(
                Record(
                    topic=message.topic(),
                    partition=message.partition(),
                    offset=message.offset(),
                    key=message.key(),
                    value=message.value(),
                    headers=dict(message.headers() or []),
                    timestamp_ms=timestamp_ms,
                    timestamp_is_broker_append=timestamp_type == TIMESTAMP_LOG_APPEND_TIME,
                )
            )
        return records

    def commit(self, positions: Mapping[Partition, int], asynchronous: bool = False) -> None:
        """A synchronous commit rides out a moving group coordinator (a broker failing over) by retrying;
        if the group has rebalanced the partitions away, raises CommitRejectedError: the new owner
        reprocesses those records (at-least-once; identify drops the duplicates)."""
        if not positions:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        if asynchronous:
            try:
                self._consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException:
                self.commit_failures += 1  # no coordinator yet: the next commit carries these positions
            return
        deadline = time.monotonic() + COMMIT_RETRY_S
        while True:
            try:
                self._consumer.commit(offsets=offsets, asynchronous=False)
                return
            except KafkaException as exception:
                error = exception.args[0]
                if error.code() in REBALANCED:
                    raise CommitRejectedError(str(error)) from None
                if (error.retriable() or error.code() in COORDINATOR_MOVING) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise

    def assigned(self) -> bool:
        return bool(self._consumer.assignment())

    def lag(self, record: Record) -> int | None:
        _, high = self._consumer.get_watermark_offsets(TopicPartition(record.topic, record.partition), cached=True)
        return None if high < 0 else max(0, high - record.offset - 1)

    def close(self) -> None:
        self._consumer.close()
