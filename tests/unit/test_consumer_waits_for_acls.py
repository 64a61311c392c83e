"""A consumer refused by the brokers in its first minutes waits for its ACLs (a chart's topics Job grants them after
the pods start); refused later, it stops with the brokers' error."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, KafkaException

from aitax.pipeline.transport.confluent import ACL_GRACE_S, ConfluentConsumer


@dataclass
class Refused:
    code: int

    def error(self) -> KafkaError:
        return KafkaError(self.code)


class Refusing:
    def __init__(self, code: int) -> None:
        self.code = code

    def consume(self, num_messages: int, timeout: float) -> list[Refused]:
        return [Refused(self.code)]

    def close(self) -> None: ...


@pytest.mark.parametrize("code", [KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED])
def test_refused_at_start_waits_and_refused_after_the_grace_stops(code: int) -> None:
    consumer = ConfluentConsumer("127.0.0.1:1", "g", ["faces"])
    consumer._consumer.close()
    consumer._consumer = Refusing(code)
    assert consumer.poll_batch(10, 0.01) == []
    consumer._created = time.monotonic() - ACL_GRACE_S - 1
    with pytest.raises(KafkaException, match="uthorization"):
        consumer.poll_batch(10, 0.01)


def test_other_errors_still_stop_at_once() -> None:
    consumer = ConfluentConsumer("127.0.0.1:1", "g", ["faces"])
    consumer._consumer.close()
    consumer._consumer = Refusing(KafkaError.INVALID_GROUP_ID)
    with pytest.raises(KafkaException):
        consumer.poll_batch(10, 0.01)
