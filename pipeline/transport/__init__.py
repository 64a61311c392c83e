"""Kafka at the edge of the pipeline: small Producer/Consumer interfaces and two client implementations.

Stage code talks only to `Producer` and `Consumer`; `make_producer`/`make_consumer` pick the client:
confluent-kafka (librdkafka, the default: about 15x the throughput for thumbnail-sized records) or
kafka-python (pure Python, the client the paper's Listing 1 used).
"""

from pipeline.transport.base import (
    KAFKA_CLIENTS,
    CommitRejectedError,
    Consumer,
    DeliveryReport,
    Producer,
    Record,
    make_consumer,
    make_producer,
)

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
