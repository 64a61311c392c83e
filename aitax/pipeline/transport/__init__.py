"""Kafka at the edge of the pipeline: small Producer/Consumer interfaces and two client implementations.

Stage code talks only to `Producer` and `Consumer`; `make_producer`/`make_consumer` pick the client:
confluent-kafka (librdkafka, the default: about 15x the throughput for thumbnail-sized records) or
kafka-python (pure Python, the client the paper's Listing 1 used).
"""

from collections.abc import Sequence

from aitax.common.errors import UserError
from aitax.pipeline.transport.base import (
    KAFKA_CLIENTS,
    CommitRejectedError,
    Consumer,
    DeliveryReport,
    Producer,
    Record,
)


def make_producer(client: str, bootstrap_servers: str, linger_ms: float = 5.0, idempotent: bool = False,
                  **settings: object) -> Producer:
    """A producer (acks=all); `idempotent` for results, which must never be published twice (see base.py)."""
    if client == "confluent-kafka":
        from aitax.pipeline.transport.confluent import ConfluentProducer

        return ConfluentProducer(bootstrap_servers, linger_ms=linger_ms, idempotent=idempotent, **settings)
    if client == "kafka-python":
        from aitax.pipeline.transport.kafka_python import KafkaPythonProducer

        return KafkaPythonProducer(bootstrap_servers, linger_ms=linger_ms, idempotent=idempotent, **settings)
    raise UserError(f"--kafka-client {client!r}: choose one of {', '.join(KAFKA_CLIENTS)}")


def make_consumer(
    client: str, bootstrap_servers: str, group_id: str, topics: Sequence[str], **settings: object
) -> Consumer:
    if client == "confluent-kafka":
        from aitax.pipeline.transport.confluent import ConfluentConsumer

        return ConfluentConsumer(bootstrap_servers, group_id, topics, **settings)
    if client == "kafka-python":
        from aitax.pipeline.transport.kafka_python import KafkaPythonConsumer

        return KafkaPythonConsumer(bootstrap_servers, group_id, topics, **settings)
    raise UserError(f"--kafka-client {client!r}: choose one of {', '.join(KAFKA_CLIENTS)}")


__all__ = [
    "KAFKA_CLIENTS",
    "CommitRejectedError",
    "Consumer",
    "DeliveryReport",
    "Producer",
    "Record",
    "make_consumer",
    "make_producer",
]
