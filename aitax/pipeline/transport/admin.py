"""Cluster-side questions the stages ask: are the brokers there, and how far behind is a consumer group."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from aitax.common.errors import UserError
from aitax.pipeline.transport.security import TLS_ENV, librdkafka_settings, tls_from_environment

log = logging.getLogger(__name__)


def require_brokers(bootstrap_servers: str, timeout_s: float = 10.0, topics: Sequence[str] = (),
                    wait_s: float | None = None) -> None:
    """Fail with a one-line error instead of a client retrying silently for minutes, unless the brokers (and
    `topics`) appear within `wait_s`: $AITAX_KAFKA_WAIT_S, which the chart sets because in a fresh release the
    brokers and the topics Job start alongside the stages (locally 0: fail fast)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    wait_s = float(os.environ.get("AITAX_KAFKA_WAIT_S", "0")) if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    refusal: dict[str, str] = {}  # a TLS handshake's failure, which librdkafka reports only to this callback
    admin = AdminClient(librdkafka_settings(bootstrap_servers, {
        "log_level": 0, "error_cb": lambda error: refusal.update(last=error.str()) if "SSL" in error.str() else None}))
    next_note = 0.0
    while True:
        try:
            if not wait_s and _nothing_listens(bootstrap_servers):  # retrying cannot help: say so now
                raise KafkaException(f"nothing listens at {bootstrap_servers}")
            existing = admin.list_topics(timeout=timeout_s).topics
            missing = [t for t in topics if t not in existing]
            # A principal sees only the topics its ACLs name: a topic it may not use looks missing.
            tls = tls_from_environment()
            unseen = f"missing or not allowed to {tls.folder}" if tls else "missing"
            problem = f"topic(s) {', '.join(missing)} {unseen} at {bootstrap_servers}" if missing else None
        except KafkaException:
            problem = f"Kafka brokers at {bootstrap_servers} unreachable"
            admin.poll(0)  # serves error_cb
            if refusal:
                tls = tls_from_environment()
                reason = refusal["last"].split("/bootstrap: ", 1)[-1].split(" (after ", 1)[0]
                problem = (f"Kafka brokers at {bootstrap_servers} refused the TLS identity "
                           f"{tls.folder if tls else f'(none: ${TLS_ENV} unset)'}: {reason}")
        if problem is None:
            return
        if time.monotonic() >= deadline:
            hint = "" if wait_s or refusal else " (is `aitax stack up` running?" + (
                "" if tls_from_environment() else f" Do the brokers need a certificate, ${TLS_ENV}?") + ")"
            raise UserError(f"{problem}{hint}")
        if time.monotonic() >= next_note:
            log.info("waiting for Kafka: %s", problem)
            next_note = time.monotonic() + 30
        time.sleep(2)


def _nothing_listens(bootstrap_servers: str) -> bool:
    """Every bootstrap address refuses a TCP connection at once: no broker runs there, so a client would only
    retry until its timeout. Anything else (accepted, slow, unresolvable) is left to the client to judge."""
    for address in bootstrap_servers.split(","):
        host, _, port = address.strip().split("://")[-1].rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return False
        except ConnectionRefusedError:
            continue
        except (OSError, ValueError):
            return False
    return True


def partition_count(bootstrap_servers: str, topic: str, timeout_s: float = 10.0) -> int:
    """Partitions of `topic` (0 if it does not exist)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(librdkafka_settings(bootstrap_servers, {"log_level": 0}))
    metadata = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    return 0 if metadata is None or metadata.error is not None else len(metadata.partitions)


def group_lag(bootstrap_servers: str, group_id: str, topic: str, timeout_s: float = 10.0) -> int:
    """Records in `topic` not yet committed by `group_id` (a partition it never committed counts whole)."""
    from confluent_kafka import Consumer, TopicPartition

    # log_level 0: while a broker is down (the fault experiments) librdkafka would log every refused connect
    consumer = Consumer(librdkafka_settings(bootstrap_servers, {"group.id": group_id, "enable.auto.commit": False,
                                                                "log_level": 0}))
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


T = TypeVar("T")
RETRY_PAUSE_S = 1.0


def retry_transient(attempt: Callable[[], T], timeout_s: float) -> T:
    """`attempt()`, made again after a transient Kafka error until `timeout_s` has passed. Just after brokers start,
    librdkafka may drop the connection a request waits on (_DESTROY_BROKER), or the controller may still be moving.
    Each attempt makes its own client. Any other error, or a transient one past the deadline, is raised as it is."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except KafkaException as exception:
            if not transient(exception.args[0]) or time.monotonic() >= deadline:
                raise
        time.sleep(RETRY_PAUSE_S)


def transient(error: object) -> bool:
    from confluent_kafka import KafkaError

    if not isinstance(error, KafkaError):
        return False
    dropped = (KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
    return error.retriable() or error.code() in dropped

