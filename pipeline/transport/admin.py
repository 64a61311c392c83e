"""Cluster-side questions the stages ask: are the brokers there, and how far behind is a consumer group."""

from __future__ import annotations

from aitax.errors import UserError


def require_brokers(bootstrap_servers: str, timeout_s: float = 10.0) -> None:
    """Fail fast with a one-line error instead of a client retrying silently for minutes."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException:
        raise UserError(f"Kafka brokers at {bootstrap_servers} unreachable (is `aitax stack up` running?)") from None


def partition_count(bootstrap_servers: str, topic: str, timeout_s: float = 10.0) -> int:
    """Partitions of `topic` (0 if it does not exist)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    metadata = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    return 0 if metadata is None or metadata.error is not None else len(metadata.partitions)


def group_lag(bootstrap_servers: str, group_id: str, topic: str, timeout_s: float = 10.0) -> int:
    """Records in `topic` not yet committed by `group_id` (a partition it never committed counts whole)."""
    from confluent_kafka import Consumer, TopicPartition

    # log_level 0: while a broker is down (the fault experiments) librdkafka would log every refused connect
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group_id, "enable.auto.commit": False,
                         "log_level": 0})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        partitions = [TopicPartition(topic, p) for p in metadata.partitions]
        committed = consumer.committed(partitions, timeout=timeout_s)
        lag = 0
        for tp in committed:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=timeout_s)
            lag += high - (tp.offset if tp.offset >= 0 else low)
        return lag
    finally:
        consumer.close()
