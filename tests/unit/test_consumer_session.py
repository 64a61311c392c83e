"""Both Kafka clients give a consumer the same session: a consumer that dies hands its partitions over within
`SESSION_TIMEOUT_MS` (librdkafka's own default would hold them 45 s), heartbeating well inside it."""

from __future__ import annotations

from typing import ClassVar

import pytest

from aitax.pipeline.transport import confluent, kafka_python
from aitax.pipeline.transport.base import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS


class _Recording:
    settings: ClassVar[dict] = {}  # what the last client was built with

    def __init__(self, settings: dict | None = None, **kwargs: object) -> None:
        type(self).settings = {**(settings or {}), **kwargs}
        self._net = type("Net", (), {"sleep": staticmethod(lambda _s: None)})()  # kafka-python's loop

    def subscribe(self, *args: object, **kwargs: object) -> None: ...

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}


def test_both_clients_time_a_dead_consumer_out_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confluent, "_Consumer", _Recording)
    confluent.ConfluentConsumer("127.0.0.1:1", "g", ["faces"])
    librdkafka = dict(_Recording.settings)
    monkeypatch.setattr(kafka_python, "KafkaConsumer", _Recording)
    kafka_python.KafkaPythonConsumer("127.0.0.1:1", "g", ["faces"])
    python = dict(_Recording.settings)
    assert librdkafka["session.timeout.ms"] == python["session_timeout_ms"] == SESSION_TIMEOUT_MS <= 10_000
    assert librdkafka["heartbeat.interval.ms"] == python["heartbeat_interval_ms"] == HEARTBEAT_INTERVAL_MS
    assert 3 * HEARTBEAT_INTERVAL_MS <= SESSION_TIMEOUT_MS
