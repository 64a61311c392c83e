"""The `helm test` probe: produce one record with acks=all and read the same record back through the brokers.

Run as `python -m aitax.experiment.kafka_probe --bootstrap HOST:PORT,...`. The probe topic is created when
missing with the pipeline's durability (RF 3, min.insync 2), so a pass means replicated writes work.
Exit 0 on success; a one-line reason and exit 1 otherwise. Needs only confluent-kafka (the emulator image).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from aitax.pipeline.transport.security import librdkafka_settings


def ensure_probe_topic(bootstrap: str, topic: str, replication_factor: int, min_insync: int, timeout_s: float) -> None:
    """Retried on transient errors, as the local stack's topics are: a release's brokers may have just started."""
    from aitax.pipeline.transport.admin import retry_transient

    retry_transient(lambda: _create_probe_topic(bootstrap, topic, replication_factor, min_insync, timeout_s),
                    timeout_s)


def _create_probe_topic(bootstrap: str, topic: str, replication_factor: int, min_insync: int,
                        timeout_s: float) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(librdkafka_settings(bootstrap, {"log_level": 0}))
    if topic in admin.list_topics(timeout=timeout_s).topics:
        return
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=replication_factor,
                  config={"min.insync.replicas": str(min_insync), "retention.ms": "3600000"})],
        operation_timeout=timeout_s,
    )
    for future in futures.values():
        try:
            future.result()
        except Exception as error:  # another probe created it first: fine
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise


def produce_probe(bootstrap: str, topic: str, key: bytes, payload: bytes, timeout_s: float) -> int:
    """Send one record and wait for its acknowledgement by the in-sync replicas; return its offset."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(librdkafka_settings(bootstrap, {"acks": "all", "enable.idempotence": True,
                                                        "log_level": 0, "message.timeout.ms": int(timeout_s * 1000)}))
    delivered: list = []
    producer.produce(topic, value=payload, key=key, on_delivery=lambda err, msg: delivered.append((err, msg)))
    producer.flush(timeout_s)
    if not delivered:
        raise TimeoutError(f"no acknowledgement for the probe record within {timeout_s:.0f} s")
    error, message = delivered[0]
    if error is not None:
        raise KafkaException(error)
    return message.offset()


def consume_probe(bootstrap: str, topic: str, key: bytes, offset: int, timeout_s: float) -> bytes:
    """Read partition 0 from `offset` until the record with `key` appears; return its value."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(librdkafka_settings(bootstrap, {"group.id": f"aitax-probe-{uuid.uuid4().hex[:8]}",
                                                        "enable.auto.commit": False, "log_level": 0,
                                                        "isolation.level": "read_committed"}))
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            if message.key() == key:
                return message.value()
        raise TimeoutError(f"the probe record was not read back within {timeout_s:.0f} s")
    finally:
        consumer.close()


def listener_security(bootstrap: str, timeout_s: float) -> str:
    """What one broker says of its listeners' security, e.g. `listeners SSL:SSL,CONTROLLER:SSL, client
    certificates required, authorizer StandardAuthorizer`."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(librdkafka_settings(bootstrap, {"log_level": 0}))
    broker = min(admin.list_topics(timeout=timeout_s).brokers)
    future = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, str(broker))],
                                    request_timeout=timeout_s)
    configs = next(iter(future.values())).result()

    def value(name: str) -> str:
        entry = configs.get(name)
        return entry.value if entry is not None and entry.value else ""

    authorizer = value("authorizer.class.name").rsplit(".", 1)[-1] or "none"
    client_auth = value("ssl.client.auth") or "none"
    return (f"listeners {value('listener.security.protocol.map')}, client certificates {client_auth}, "
            f"authorizer {authorizer}")


def run_probe(bootstrap: str, topic: str, replication_factor: int = 3, min_insync: int = 2,
              timeout_s: float = 60.0) -> str:
    """Produce and consume one probe record, and read the listeners' security; returns a one-line summary, raises
    on any failure."""
    key = f"probe-{uuid.uuid4().hex}".encode()
    payload = f"aitax probe {time.time_ns()}".encode()
    started = time.monotonic()
    ensure_probe_topic(bootstrap, topic, replication_factor, min_insync, timeout_s)
    offset = produce_probe(bootstrap, topic, key, payload, timeout_s)
    echoed = consume_probe(bootstrap, topic, key, offset, timeout_s)
    if echoed != payload:
        raise ValueError(f"read back {echoed!r}, expected {payload!r}")
    elapsed_s = time.monotonic() - started
    return (f"probe ok: {topic}@{offset} produced (acks=all) and consumed in {elapsed_s:.2f} s; "
            f"{listener_security(bootstrap, timeout_s)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafka_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="brokers HOST:PORT,...")
    parser.add_argument("--topic", default="aitax.probe", help="probe topic (default aitax.probe)")
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--min-insync-replicas", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per step (default 60)")
    args = parser.parse_args(argv)
    try:
        print(run_probe(args.bootstrap, args.topic, args.replication_factor, args.min_insync_replicas, args.timeout))
    except Exception as error:  # the one line `kubectl logs` shows for a failed `helm test`
        print(f"probe failed against {args.bootstrap}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
