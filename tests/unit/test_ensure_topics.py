"""Topic creation (the local stack's, the `helm test` probe's) outlives a dropped client connection and fails at
once on a bad request."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from aitax.common.errors import UserError
from aitax.pipeline.transport import admin
from aitax.stack import kafka
from aitax.stack.config import StackConfig, TopicSpec


def _failing(codes: list[int]) -> tuple[list[int], object]:
    calls: list[int] = []

    def attempt(config: StackConfig, specs: list[TopicSpec], timeout_s: float) -> None:
        calls.append(1)
        if codes:
            raise KafkaException(KafkaError(codes.pop(0)))

    return calls, attempt


def test_a_dropped_broker_handle_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls, attempt = _failing([KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT])
    monkeypatch.setattr(kafka, "_ensure_topics_once", attempt)
    monkeypatch.setattr(admin, "RETRY_PAUSE_S", 0.0)
    kafka.ensure_topics(StackConfig(), [TopicSpec("t", 1)])
    assert len(calls) == 3


def test_an_invalid_request_fails_once_naming_the_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    calls, attempt = _failing([KafkaError.INVALID_CONFIG])
    monkeypatch.setattr(kafka, "_ensure_topics_once", attempt)
    with pytest.raises(UserError, match=r"creating topics \['faces-x'\] failed"):
        kafka.ensure_topics(StackConfig(), [TopicSpec("faces-x", 1)])
    assert len(calls) == 1


def test_a_transient_error_past_the_deadline_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    calls, attempt = _failing([KafkaError._DESTROY_BROKER] * 100)
    monkeypatch.setattr(kafka, "_ensure_topics_once", attempt)
    monkeypatch.setattr(admin, "RETRY_PAUSE_S", 0.0)
    with pytest.raises(UserError, match="_DESTROY_BROKER"):
        kafka.ensure_topics(StackConfig(), [TopicSpec("t", 1)], timeout_s=0.0)
    assert 1 <= len(calls) < 100


def test_the_probe_topic_is_retried_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from aitax.experiment import kafka_probe

    calls, attempt = _failing([KafkaError._DESTROY_BROKER])
    monkeypatch.setattr(kafka_probe, "_create_probe_topic", lambda *args: attempt(None, [], 0.0))
    monkeypatch.setattr(admin, "RETRY_PAUSE_S", 0.0)
    kafka_probe.ensure_probe_topic("localhost:1", "probe", 3, 2, timeout_s=5.0)
    assert len(calls) == 2


class _RecordingAdmin:
    """An admin client that answers at once and records what it was asked, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _done(self, what: str, names: list[str]) -> dict:
        from concurrent.futures import Future

        self.calls.append(what)
        future: Future = Future()
        future.set_result(None)
        return {name: future for name in names}

    def create_acls(self, bindings: list, request_timeout: float) -> dict:
        return self._done("acls", [str(binding) for binding in bindings])

    def list_topics(self, timeout: float):
        self.calls.append("list")
        return type("Metadata", (), {"topics": {}})()

    def create_topics(self, topics: list, operation_timeout: float) -> dict:
        return self._done("topics", [topic.topic for topic in topics])


def test_acls_are_granted_before_any_topic_exists() -> None:
    """A stage waits for its topics: once they exist its ACLs must already hold (identify's idempotent producer,
    refused once in between, is refused for good)."""
    admin = _RecordingAdmin()
    kafka.ensure_topics_with(admin, [TopicSpec("faces-x", 1, carries="faces")], 3, acls=True, timeout_s=1.0)
    assert admin.calls == ["acls", "list", "topics"]
