"""Real brokers: topology, topic settings read back from the brokers, durable round trips through both clients."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka.admin import AdminClient

from aitax.pipeline.transport import KAFKA_CLIENTS, DeliveryReport, make_consumer, make_producer
from aitax.pipeline.transport.base import next_offsets
from aitax.stack import kafka
from aitax.stack import stack as local_stack
from aitax.stack.config import StackConfig, TopicSpec

pytestmark = pytest.mark.integration


def _admin(config: StackConfig) -> AdminClient:
    return AdminClient(kafka.admin_settings(config))


def test_every_broker_is_in_the_metadata_with_complete_isr(stack: StackConfig) -> None:
    health = kafka.cluster_health(stack)
    assert health.brokers_in_metadata == stack.node_ids
    assert health.healthy(stack.node_ids), health


def test_up_is_idempotent(stack: StackConfig) -> None:
    pids_before = [p.pid() for p in local_stack.processes(stack)]
    started = time.monotonic()
    local_stack.up(stack, progress=lambda _: None)
    assert time.monotonic() - started < 30
    assert [p.pid() for p in local_stack.processes(stack)] == pids_before


@pytest.mark.parametrize("topic", ["faces", "identities", "faces.dlq"])
def test_pipeline_topics_are_replicated_three_ways(stack: StackConfig, topic: str) -> None:
    metadata = _admin(stack).list_topics(topic, timeout=10).topics[topic]
    assert len(metadata.partitions) >= 3
    assert all(len(p.replicas) == 3 for p in metadata.partitions.values())
    configs = kafka.describe_topic_configs(stack, topic)
    assert configs["min.insync.replicas"] == "2"
    # The brokers' append time: on faces it splits the broker wait, on identities it times the durable result
    assert configs["message.timestamp.type"] == "LogAppendTime"
    if topic == "faces":
        assert configs["retention.ms"] == str(stack.faces_retention_ms)


def _create_topic(stack: StackConfig, topic: str) -> None:
    kafka.ensure_topics(stack, [TopicSpec(topic, 3, {"message.timestamp.type": "LogAppendTime"})])


def _round_trip(stack: StackConfig, topic: str, producer_client: str, consumer_client: str, count: int) -> None:
    producer = make_producer(producer_client, stack.bootstrap_servers)
    reports: list[DeliveryReport] = []
    sent_at_ms = time.time() * 1000
    for index in range(count):
        producer.send(topic, value=bytes([index % 256]) * 37_300, key=f"cam-{index % 4}".encode(),
                      headers={"frame": str(index).encode()}, on_delivery=reports.append, opaque=index)
    assert producer.flush(60) == 0
    producer.close()
    assert len(reports) == count and all(r.error is None for r in reports), reports[:3]
    assert sorted(r.opaque for r in reports) == list(range(count))

    consumer = make_consumer(consumer_client, stack.bootstrap_servers, f"{topic}-group", [topic])
    received = []
    deadline = time.monotonic() + 60
    while len(received) < count and time.monotonic() < deadline:
        received += consumer.poll_batch(100, 1.0)
    consumer.commit(next_offsets(received))
    consumer.close()
    assert sorted(int(r.headers["frame"]) for r in received) == list(range(count))
    for record in received:
        frame = int(record.headers["frame"])
        assert record.value == bytes([frame % 256]) * 37_300
        assert record.key == f"cam-{frame % 4}".encode()
        assert record.timestamp_is_broker_append
        assert record.timestamp_ms >= sent_at_ms - 1000
    # Same key, same partition: one camera's frames stay in order for one consumer.
    partitions_per_key: dict[bytes | None, set[int]] = {}
    for record in received:
        partitions_per_key.setdefault(record.key, set()).add(record.partition)
    assert all(len(p) == 1 for p in partitions_per_key.values())


@pytest.mark.parametrize("producer_client", KAFKA_CLIENTS)
@pytest.mark.parametrize("consumer_client", KAFKA_CLIENTS)
def test_acks_all_round_trip(stack: StackConfig, unique_name: str, producer_client: str,
                             consumer_client: str) -> None:
    _create_topic(stack, unique_name)
    _round_trip(stack, unique_name, producer_client, consumer_client, count=200)


@pytest.mark.parametrize("client", KAFKA_CLIENTS)
def test_uncommitted_records_are_delivered_again(stack: StackConfig, unique_name: str, client: str) -> None:
    kafka.ensure_topics(stack, [TopicSpec(unique_name, 1)])
    producer = make_producer(client, stack.bootstrap_servers)
    for index in range(10):
        producer.send(unique_name, value=str(index).encode())
    assert producer.flush(30) == 0
    producer.close()

    def consume_all(expected: int) -> list[bytes]:
        consumer = make_consumer(client, stack.bootstrap_servers, unique_name, [unique_name])
        records, deadline = [], time.monotonic() + 30
        while len(records) < expected and time.monotonic() < deadline:
            records += consumer.poll_batch(10, 1.0)
        consumer.commit(next_offsets(records[:4]))  # only the first four were "processed"
        consumer.close()
        return [r.value for r in records]

    assert consume_all(10) == [str(i).encode() for i in range(10)]
    assert consume_all(6) == [str(i).encode() for i in range(4, 10)]


def test_a_consumer_waits_for_a_topic_created_after_it_subscribed(stack: StackConfig, unique_name: str) -> None:
    """In a cluster the topics Job runs after the identify pods start: they must wait, not crash-loop."""
    consumer = make_consumer("confluent-kafka", stack.bootstrap_servers, unique_name, [unique_name])
    records, deadline = [], time.monotonic() + 8
    while time.monotonic() < deadline:
        records += consumer.poll_batch(10, 1.0)  # raised UNKNOWN_TOPIC_OR_PART before
    kafka.ensure_topics(stack, [TopicSpec(unique_name, 1)])
    producer = make_producer("confluent-kafka", stack.bootstrap_servers)
    producer.send(unique_name, value=b"late topic")
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 60  # the next metadata refresh (10 s) finds the topic
    while not records and time.monotonic() < deadline:
        records += consumer.poll_batch(10, 1.0)
    consumer.close()
    assert [r.value for r in records] == [b"late topic"]


def test_writes_survive_a_killed_broker(stack: StackConfig, unique_name: str) -> None:
    """min.insync.replicas=2: with one of three brokers SIGKILLed, acks=all writes still succeed."""
    _create_topic(stack, unique_name)
    victim = stack.node_ids[-1]
    local_stack.kill_broker(stack, victim)
    try:
        _round_trip(stack, unique_name, "confluent-kafka", "confluent-kafka", count=50)
    finally:
        local_stack.start_broker(stack, victim)
    deadline = time.monotonic() + 90
    while not kafka.cluster_health(stack).healthy(stack.node_ids) and time.monotonic() < deadline:
        time.sleep(1)
    assert kafka.cluster_health(stack).healthy(stack.node_ids)
    # The victim's partitions stay led elsewhere until an election puts them back (the controller's own is minutes
    # away): the one `stack up` holds after starting brokers
    assert any(name.startswith(f"{unique_name}/") for name in kafka.cluster_health(stack).off_preferred)
    assert kafka.elect_preferred_leaders(stack) == {}
    deadline = time.monotonic() + 30
    while kafka.cluster_health(stack).off_preferred and time.monotonic() < deadline:
        time.sleep(0.5)
    assert kafka.cluster_health(stack).off_preferred == []


def test_warm_up_reports_its_round_trips_and_leaves_no_topic_or_group(stack: StackConfig) -> None:
    from aitax.stack.warmup import WARMUP_GROUP, WARMUP_TOPIC, warm_brokers

    warm = warm_brokers(kafka.admin_settings(stack), stack.replication_factor, stack.min_insync_replicas, seconds=2)
    assert warm.records >= 8 and warm.seconds >= 2
    assert 0 < warm.last_round_trip_ms < 30_000 and 0 < warm.first_round_trip_ms < 30_000
    assert f"{warm.records:,} records" in warm.summary()
    deadline = time.monotonic() + 30  # a deleted topic leaves the metadata once every broker has dropped it
    while WARMUP_TOPIC in _admin(stack).list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.5)
    assert WARMUP_TOPIC not in _admin(stack).list_topics(timeout=10).topics
    groups = _admin(stack).list_consumer_groups(request_timeout=10).result().valid
    assert WARMUP_GROUP not in [group.group_id for group in groups]


def test_the_topics_job_warms_a_new_releases_brokers_once(stack: StackConfig, unique_name: str) -> None:
    """`aitax cluster ensure-topics --broker-warmup` (the chart's topics Job) warms the brokers when a topic is
    missing, before creating it, and not when every topic exists (an upgrade of a running release)."""
    import os
    import subprocess
    import sys

    from aitax.pipeline.transport.security import TLS_ENV
    from aitax.stack.security import ADMIN, identity

    env = {**os.environ, TLS_ENV: str(identity(ADMIN))} if stack.tls else dict(os.environ)
    command = [sys.executable, "-m", "aitax.cli", "cluster", "ensure-topics", "--bootstrap", stack.bootstrap_servers,
               "--topic", f"{unique_name}:1:faces", "--broker-warmup", "2"]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-1000:]
    warmed = re.match(r"brokers warmed in (\d+) s", first.stdout)  # the 2 s asked for and its last round trips
    assert warmed and 2 <= int(warmed.group(1)) <= 7, first.stdout
    assert unique_name in _admin(stack).list_topics(timeout=10).topics
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "brokers warmed" not in again.stdout, again.stdout
