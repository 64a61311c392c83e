"""Brokers at speed before the first run: the stack's share of "ready means ready".

Freshly started brokers run Kafka's request paths (the TLS read, the append, the follower's fetch, the consumer's
fetch, the offset commit) in the JVM's interpreter until its JIT has compiled them, which takes thousands of
requests. Measured here (2 cores, a fresh stack, `make demo`): the demo's densest 5 s, its first load, took end to
end p50 632 ms with the three brokers using 1.2-1.5 cores between them; after 20 s of this warm-up 78 ms, as on a
stack that has served a run before. So `stack up` sends records the way the pipeline does (acks=all, idempotent,
over TLS as the admin) to a topic of its own for a few seconds, reads them back in a group that commits, and deletes
the topic: no trace is left in the pipeline's topics or groups.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from aitax.common.daemons import poll_until
from aitax.stack.config import TopicSpec

BROKER_WARMUP_S = 20.0
WARMUP_TOPIC = "aitax.warmup"
WARMUP_GROUP = "aitax.warmup"
RECORD_BYTES = 8_000
ROUND_TRIP_RECORDS = 8  # records per acknowledged round trip: small requests, many of them, as the pipeline sends
EDGE_ROUND_TRIPS = 50  # the first and the last this many round trips are reported (the first of all, which opens
# the connections and the idempotent producer's session, left out)


@dataclass(frozen=True)
class WarmUp:
    seconds: float
    records: int
    first_round_trip_ms: float  # p50 of the first EDGE_ROUND_TRIPS acks=all round trips
    last_round_trip_ms: float  # ... and of the last

    def summary(self) -> str:
        return (f"brokers warmed in {self.seconds:.0f} s: {self.records:,} records; acks=all round trip p50 "
                f"{self.first_round_trip_ms:.0f} ms over the first {EDGE_ROUND_TRIPS}, "
                f"{self.last_round_trip_ms:.0f} ms over the last {EDGE_ROUND_TRIPS}")


def warm_brokers(admin_settings: Mapping[str, object], replication_factor: int, min_insync_replicas: int,
                 seconds: float = BROKER_WARMUP_S) -> WarmUp:
    """Produce and consume on a topic of the warm-up's own for `seconds`, then delete it. `admin_settings`: a
    librdkafka client's (the brokers and an identity allowed to create and delete topics and groups): the local
    stack's admin, or a release's topics Job."""
    from confluent_kafka.admin import AdminClient

    from aitax.pipeline.transport import make_consumer, make_producer
    from aitax.pipeline.transport.base import next_offsets
    from aitax.stack.kafka import ensure_topics_with

    admin = AdminClient(dict(admin_settings))
    spec = TopicSpec(WARMUP_TOPIC, 6, {"min.insync.replicas": str(min_insync_replicas), "retention.ms": "60000"})
    ensure_topics_with(admin, [spec], replication_factor, acls=False, timeout_s=30.0)
    # a consumer subscribed before the metadata names the new topic warns that it does not exist
    poll_until(lambda: _partitions(admin) == spec.partitions, 30.0, interval_s=0.2)
    bootstrap = str(admin_settings["bootstrap.servers"])
    client = {key: value for key, value in admin_settings.items() if key != "bootstrap.servers"}
    producer = make_producer("confluent-kafka", bootstrap, linger_ms=0, idempotent=True, **client)
    consumer = make_consumer("confluent-kafka", bootstrap, WARMUP_GROUP, [WARMUP_TOPIC], **client)
    stop = threading.Event()

    def read_back() -> None:
        while not stop.is_set():
            records = consumer.poll_batch(64, 0.2)
            if records:
                consumer.commit(next_offsets(records), asynchronous=True)

    reader = threading.Thread(target=read_back, name="warm-up reader", daemon=True)
    reader.start()
    payload, sent, round_trips = os.urandom(RECORD_BYTES), 0, list[float]()
    started = time.monotonic()
    try:
        while (now := time.monotonic()) - started < seconds:
            for _ in range(ROUND_TRIP_RECORDS):
                producer.send(WARMUP_TOPIC, payload, key=str(sent % 64).encode())
                sent += 1
            producer.flush(30.0)
            round_trips.append((time.monotonic() - now) * 1000.0)
    finally:
        stop.set()
        reader.join(10.0)
        producer.close()
        consumer.close()
        for future in admin.delete_topics([WARMUP_TOPIC], operation_timeout=30.0).values():
            future.result()
        _delete_group(admin)
    elapsed = time.monotonic() - started
    timed = round_trips[1:] or round_trips
    return WarmUp(elapsed, sent, statistics.median(timed[:EDGE_ROUND_TRIPS]),
                  statistics.median(timed[-EDGE_ROUND_TRIPS:]))


def _delete_group(admin) -> None:
    """The warm-up's group, unless it never committed (then it does not exist)."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        admin.delete_consumer_groups([WARMUP_GROUP], request_timeout=30.0)[WARMUP_GROUP].result()
    except KafkaException as error:
        if error.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
            raise


def _partitions(admin) -> int:
    topic = admin.list_topics(timeout=10).topics.get(WARMUP_TOPIC)
    return 0 if topic is None or topic.error is not None else len(topic.partitions)
