"""The dynamic batcher and the results' timing on real brokers, through both Kafka clients: the same batches from
the same arrivals, an identity timed at its append (the delivery report and every reader agree), and a run that
never does an interrupted run's leftover work."""

from __future__ import annotations

import random
import time

import pytest

from aitax.emulation.profile import load_profile
from aitax.emulation.workers import EmulatedIdentifier
from aitax.pipeline.identify import IdentifyStats, identify_loop
from aitax.pipeline.schema import FaceMessage, FaceMeta, Topics, encode_face
from aitax.pipeline.transport import KAFKA_CLIENTS, make_consumer, make_producer
from aitax.pipeline.transport.admin import group_lag
from aitax.pipeline.transport.batcher import BatchPolicy, DynamicBatcher
from aitax.pipeline.transport.readback import read_identities
from aitax.stack import kafka
from aitax.stack.config import StackConfig, TopicSpec
from aitax.telemetry.sinks import NullSink
from tests.recording import RecordingSink

pytestmark = pytest.mark.integration


def _faces(run_id: str, count: int) -> list[FaceMessage]:
    now = time.time_ns()
    return [FaceMessage(FaceMeta(run_id, "cam-1", frame, 0, 1, (0, 0, 160, 160), 1.0, "synthetic", *[now] * 6),
                        b"thumbnail")
            for frame in range(count)]


def _instant_identify() -> EmulatedIdentifier:
    """Identification's compute as the emulator's sleep, 1000x faster than the paper's: the Kafka path is under test."""
    return EmulatedIdentifier(load_profile("paper"), 1000.0, random.Random(1))


def _send(stack: StackConfig, topic: str, faces: list[FaceMessage]) -> None:
    """In one produce request (the linger outlasts the sends; the flush sends them at once): a burst."""
    producer = make_producer("confluent-kafka", stack.bootstrap_servers, linger_ms=5_000)
    for face in faces:
        key, value, headers = encode_face(face)
        producer.send(topic, value, key=key, headers=headers)
    assert producer.flush(30) == 0


def _assigned_batcher(stack: StackConfig, client: str, topic: str, group: str, policy: BatchPolicy):
    consumer = make_consumer(client, stack.bootstrap_servers, group, [topic])
    batcher = DynamicBatcher(consumer, policy)
    deadline = time.monotonic() + 60
    while not consumer.assigned() and time.monotonic() < deadline:
        assert batcher.next_batch().records == []
    assert consumer.assigned()
    return consumer, batcher


def _next_records(batcher: DynamicBatcher, timeout_s: float = 30.0) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if batch := batcher.next_batch():
            return batch.records
    return []


@pytest.mark.parametrize("client", KAFKA_CLIENTS)
def test_a_burst_forms_one_full_batch_and_a_lone_face_a_batch_of_its_own(stack: StackConfig, unique_name: str,
                                                                         client: str) -> None:
    topic = f"{unique_name}-faces"
    kafka.ensure_topics(stack, [TopicSpec(topic, 1, {"message.timestamp.type": "LogAppendTime"})])
    consumer, batcher = _assigned_batcher(stack, client, topic, f"{unique_name}-group", BatchPolicy(max_batch=8))
    try:
        _send(stack, topic, _faces(unique_name, 11))  # all in the brokers before the consumer looks again
        burst = _next_records(batcher)
        rest = _next_records(batcher)
        assert (len(burst), len(rest)) == (8, 3)  # as full as the maximum, never waiting for more
        _send(stack, topic, _faces(unique_name, 1))
        lone = _next_records(batcher)
        assert [r.offset for r in lone] == [11]  # alone: with no delay allowed nothing is waited for
    finally:
        consumer.close()


@pytest.mark.parametrize("client", KAFKA_CLIENTS)
def test_an_identity_is_timed_at_its_append_as_its_delivery_report_and_its_readers_see_it(
        stack: StackConfig, unique_name: str, client: str) -> None:
    topics = Topics.with_prefix(f"{unique_name}-")
    kafka.ensure_topics(stack, stack.topics(topics))
    _send(stack, topics.faces, _faces(unique_name, 5))
    consumer = make_consumer(client, stack.bootstrap_servers, f"{unique_name}-identify", [topics.faces])
    # A results linger far above the brokers' round trip: the identities wait in the client before they are sent.
    results = make_producer(client, stack.bootstrap_servers, linger_ms=300)
    stats, sink, deadline = IdentifyStats(), RecordingSink(), time.monotonic() + 60
    identify_loop(consumer, results, _instant_identify(),
                  sink, lambda: stats.faces >= 5 or time.monotonic() > deadline, topics=topics, stats=stats)
    consumer.close()
    results.close()
    identities, duplicates = read_identities(stack.bootstrap_servers, unique_name, topic=topics.identities)
    assert (len(identities), duplicates) == (5, 0)
    reported = {(e.frame_index, e.face_index): e.delivered_ns for e in sink.events if e.stage == "identify"}
    for identity in identities:
        assert identity.delivered_ns == reported[identity.frame_index, identity.face_index]  # one number everywhere
        assert identity.detected_ns <= identity.appended_ns <= identity.requested_ns <= identity.fetched_ns \
            <= identity.identify_start_ns <= identity.identified_ns <= identity.delivered_ns
    # The first identity waited out the whole linger (later ones may join its request): counted, not hidden.
    assert max(i.delivered_ns - i.identified_ns for i in identities) >= 250_000_000


@pytest.mark.parametrize("client", KAFKA_CLIENTS)
def test_a_run_never_identifies_what_an_interrupted_run_left_in_the_topic(stack: StackConfig, unique_name: str,
                                                                          client: str) -> None:
    topics = Topics.with_prefix(f"{unique_name}-")
    kafka.ensure_topics(stack, stack.topics(topics))
    _send(stack, topics.faces, _faces("interrupted", 6))  # the leftovers of a run that never finished
    _send(stack, topics.faces, _faces(unique_name, 4))
    group = f"identify-{unique_name}"
    consumer = make_consumer(client, stack.bootstrap_servers, group, [topics.faces])
    results = make_producer(client, stack.bootstrap_servers, linger_ms=5)
    stats, deadline = IdentifyStats(), time.monotonic() + 60
    identify_loop(consumer, results, _instant_identify(),
                  NullSink(), lambda: stats.faces + stats.other_runs >= 10 or time.monotonic() > deadline,
                  topics=topics, stats=stats, run_id=unique_name)
    consumer.close()
    results.close()
    assert (stats.faces, stats.other_runs) == (4, 6)
    assert read_identities(stack.bootstrap_servers, "interrupted", topic=topics.identities) == ([], 0)
    assert group_lag(stack.bootstrap_servers, group, topics.faces) == 0  # the leftovers are committed past
